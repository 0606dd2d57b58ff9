"""The images built by ``images/build.sh`` for every test layer (registered by
``tests/conftest.py``): ``built_images`` (session) builds the hub, notebook and trainer once
per session (what builds them, in the build cache every clone shares: nothing is rebuilt that
any clone built before) and returns each image's report row (tag, digest, layout, pinned
packages); ``bundles`` (session) unpacks each, every layer once in that cache. ``trainer_images_entry(row)`` is the row as an entry of the cluster
settings' ``images`` list; ``own_cluster(workdir, ...)`` is a small control plane of a test
module's own, not in host mode (a pod runs in its image or not at all).

``images/build.sh`` holds the image store's lock, so sessions (of any clone) build in turn.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from aviflow_testcluster import Cluster, _build, _oci
from aviflow_testcluster.pytest_plugin import uses_fixture

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / ".build"
IMAGES = ("hub", "notebook", "trainer")
BUILD_TIMEOUT = 2700


_started: list[Future[subprocess.CompletedProcess[str]]] = []
_running: list[subprocess.Popen[str]] = []


def _run_build() -> subprocess.CompletedProcess[str]:
    """``images/build.sh`` in a process group of its own, which :func:`_stop_build` ends
    whole (a timed-out, interrupted or abandoned build leaves no buildah or pip behind)."""
    t0 = time.monotonic()
    cmd = ["bash", str(ROOT / "images" / "build.sh"), *IMAGES]
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _running.append(proc)
    try:
        out, err = proc.communicate(timeout=BUILD_TIMEOUT)
        code = proc.returncode
    except subprocess.TimeoutExpired:  # every test that needs them says so
        _stop_build()
        out, _ = proc.communicate()
        code, err = -1, f"timed out after {BUILD_TIMEOUT} s"
    print(f"images built in {time.monotonic() - t0:.0f} s:\n{out}", file=sys.stderr)
    return subprocess.CompletedProcess(cmd, code, out, err)


@atexit.register
def _stop_build() -> None:
    """End a build still running, with every process it started."""
    for proc in _running:
        if proc.poll() is not None:
            continue
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_build() -> Future[subprocess.CompletedProcess[str]]:
    """``images/build.sh`` for all three, started once per process (each worker's; the build
    script holds the image store's lock, and builds nothing that is in the build cache) in a
    thread of its own, so that it overlaps what else is built before the first test. Called
    from pytest's hooks and fixtures only, all on its main thread."""
    if not _started:
        future: Future[subprocess.CompletedProcess[str]] = Future()

        def run() -> None:
            try:
                future.set_result(_run_build())
            except BaseException as exc:  # the fixture raises it in every test
                future.set_exception(exc)

        threading.Thread(target=run, name="aviflow-images", daemon=True).start()
        _started.append(future)
    return _started[0]


def _build_images() -> subprocess.CompletedProcess[str]:
    """The finished build (started here if it was not yet); interrupted while it waits
    (Ctrl-C), the build is ended first."""
    try:
        return _start_build().result()
    except BaseException:
        _stop_build()
        raise


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Starts building the images when a selected test needs them, as the control plane's
    binaries are built: before the first test, outside every test's timeout (a cold build
    fetches a Debian base and torch, which can take longer than one test may). The build runs
    beside the control plane's (``pytest_collection_finish`` of the cluster plugin): it waits
    on the network and the disk about half of its time, the Go compiler on neither."""
    if uses_fixture(items, "built_images"):
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line("aviflow images: building (cached: seconds; cold: many minutes)")
        _start_build()


@pytest.hookimpl(trylast=True)  # after the cluster plugin's build
def pytest_collection_finish(session: pytest.Session) -> None:
    """Waits for the images' build (when one was started) before the first test."""
    if _started:
        _build_images()


@pytest.fixture(scope="session")
def built_images() -> dict[str, dict[str, Any]]:
    """``images/build.sh`` for all three; its report row per image (tag, digest, layout)."""
    proc = _build_images()
    assert proc.returncode == 0, (
        f"images/build.sh failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    rows = [json.loads(line) for line in (BUILD / "images.jsonl").read_text().splitlines()]
    return {row["name"]: row for row in rows}


@pytest.fixture(scope="session")
def bundles(built_images: dict[str, dict[str, Any]]) -> dict[str, _oci.Bundle]:
    return {
        name: _oci.unpack(Path(row["layout"]), row["ref"]) for name, row in built_images.items()
    }


def trainer_images_entry(row: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A built image's report row as an entry of ``ClusterSettings.images``."""
    return {
        "name": name or f"trainer-{row['lockHash']}",
        "image": row["image"],
        "lockHash": row["lockHash"],
        "packages": row["packages"],
    }


@contextlib.contextmanager
def own_cluster(workdir: Path, hgx_nodes: int = 1, cpu_nodes: int = 1) -> Iterator[Cluster]:
    """A cluster of the caller's own, not in host mode; stopped afterwards, leaving no
    process (for cluster-scoped objects that must not meet the session cluster's)."""
    _build.build()
    cluster = Cluster.start(
        workdir, hgx_nodes=hgx_nodes, cpu_nodes=cpu_nodes, die_with_parent=True, host_mode=False
    )
    try:
        yield cluster
    finally:
        cluster.stop()
    assert cluster.processes() == []
