"""The pytest plugin behind ``k8s_cluster`` / ``k8s_namespace`` (documented in
``tests/cluster/plugin.py`` and ``tests/cluster/conftest.py``)."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from . import _build, _procs
from ._cluster import RESTRICTED, Cluster
from ._lock import locked

__all__ = [
    "k8s_cluster",
    "k8s_namespace",
    "pytest_collection_finish",
    "pytest_runtest_makereport",
]


# The session's cluster opts into host mode: the tests' pods name images such as
# aviflow/trainer:latest that are not built, and run on this machine's Python. A pod whose
# image is in images/.build/oci (make images) runs inside it all the same.
HOST_MODE = True


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build what the selected tests need before the first of them, outside every test's
    timeout: the control plane's binaries for a test of the cluster, then ``helm`` for a
    chart test (each cached; cold, minutes). The images plugin's build runs meanwhile."""
    items = session.items
    tr = session.config.pluginmanager.get_plugin("terminalreporter")
    if uses_fixture(items, "k8s_cluster") and not _build.binaries_present():
        if tr is not None:
            tr.write_line("aviflow test cluster: building binaries (cold cache: long)")
        _build.build()
    if uses_fixture(items, "helm") and not _build.helm_path().is_file():
        if tr is not None:
            tr.write_line("aviflow test cluster: building helm (cold cache: minutes)")
        _build.build_helm()


def uses_fixture(items: list[pytest.Item], fixture: str) -> bool:
    """Whether a test among ``items`` uses ``fixture`` (the images plugin's question too)."""
    return any(fixture in getattr(item, "fixturenames", ()) for item in items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """When a test that used the cluster fails, attach what a person would look at first:
    every pod with its node and phase, recent events, and the tail of each component's log."""
    outcome = yield
    report = outcome.get_result()
    cluster = getattr(item, "funcargs", {}).get("k8s_cluster")
    if report.when != "call" or not report.failed or not isinstance(cluster, Cluster):
        return
    for title, args in (
        ("pods", ("get", "pods", "-A", "-o", "wide")),
        ("events", ("get", "events", "-A", "--sort-by=.lastTimestamp")),
    ):
        try:
            proc = cluster.kubectl(*args, check=False, timeout=20)
            report.sections.append((f"test cluster: {title}", proc.stdout + proc.stderr))
        except Exception as e:  # diagnostics must never hide the failure itself
            report.sections.append((f"test cluster: {title}", repr(e)))
    tails: list[str] = []
    cluster.dump_logs_tail(tails.append, lines=40)
    report.sections.append(("test cluster: component logs", "\n".join(tails)))


def _users(path: Path) -> list[int]:
    try:
        pids = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    return [p for p in pids if _procs.alive(p)]


def _stop_and_check(cluster: Cluster) -> None:
    swept = cluster.stop()
    left = cluster.processes()
    if left:
        pytest.fail(f"test cluster left processes behind: {left}")
    if swept:
        warnings.warn(f"test cluster teardown had to SIGKILL stray pids {swept}", stacklevel=1)


@pytest.fixture(scope="session")
def k8s_cluster(tmp_path_factory, request) -> Iterator[Cluster]:
    """A running test cluster shared by the whole session (and by xdist workers)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        cluster = Cluster.start(
            tmp_path_factory.mktemp("k8s-cluster", numbered=True),
            die_with_parent=True,
            host_mode=HOST_MODE,
        )
        atexit.register(cluster.stop)
        try:
            yield cluster
        finally:
            _stop_and_check(cluster)
        return

    # xdist: one cluster for all workers; the last worker to leave stops it.
    root = tmp_path_factory.getbasetemp().parent / "k8s-cluster-shared"
    root.mkdir(exist_ok=True)
    lock, users_file, workdir = root / "lock", root / "users.json", root / "cluster"
    with locked(lock):
        users = _users(users_file)
        cluster = None
        if users and (workdir / "state.json").exists():
            cluster = Cluster.load(workdir)
            if not all(_procs.alive(p) for p in cluster.pids.values()):
                cluster.stop()
                cluster = None
        if cluster is None:
            cluster = Cluster.start(workdir, die_with_parent=False, host_mode=HOST_MODE)
        users.append(os.getpid())
        users_file.write_text(json.dumps(users))

    def leave() -> None:
        with locked(lock):
            left = [p for p in _users(users_file) if p != os.getpid()]
            users_file.write_text(json.dumps(left))
            if not left:
                _stop_and_check(cluster)

    atexit.register(leave)
    try:
        yield cluster
    finally:
        atexit.unregister(leave)
        leave()


@contextlib.contextmanager
def _fresh_namespace(cluster: Cluster, labels: dict[str, str] | None = None) -> Iterator[str]:
    from kubernetes import client

    name = cluster.create_namespace(labels=labels)
    yield name
    with cluster.api_client() as api, contextlib.suppress(client.ApiException):
        client.CoreV1Api(api).delete_namespace(name)


@pytest.fixture
def k8s_namespace(k8s_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace for one test; deleted (without waiting) afterwards."""
    with _fresh_namespace(k8s_cluster) as name:
        yield name


@pytest.fixture
def restricted_namespace(k8s_cluster: Cluster) -> Iterator[str]:
    """A fresh namespace that enforces Pod Security's ``restricted`` profile (users' notebooks
    and trainer pods run in one such); deleted (without waiting) afterwards."""
    with _fresh_namespace(k8s_cluster, RESTRICTED) as name:
        yield name


if "pytest" not in sys.modules:  # pragma: no cover - imported only as a plugin
    raise ImportError("aviflow_testcluster.pytest_plugin is a pytest plugin")
