"""Shared fixtures. Layers: ``tests/core`` (spec, store, local backend with real accelerate
+ torch), ``tests/cluster`` (a real control plane), ``tests/notebook``, ``tests/hub``.

Fixtures here:

``run_root``
    A fresh, empty run-store root in a temp dir; ``AVIFLOW_ROOT`` points at it for the
    test (so ``aviflow.submit`` without a backend lands there too).
``local_backend``
    A :class:`~aviflow.backends.local.LocalBackend` on ``run_root`` with 8 GPU slots. After
    the test every job it ran is checked to have left no process behind (then cancelled).
``stop_jobs`` (session)
    ``stop_jobs(root)`` cancels every unfinished job of a run-store root and returns the
    ids of those that left processes behind (killed too).
``leftover_processes``
    ``leftover_processes(job_id)`` -> pids still carrying the job's tag.
``k8s_cluster``, ``k8s_namespace``
    A real Kubernetes control plane with Kueue and fake HGX/CPU nodes whose pods run as
    local processes (session-scoped; built from Go modules on first use), and a fresh
    namespace per test. See ``tests/cluster/README.md``.
``crd_installed``, ``make_pool``
    The TrainJob CRD on that cluster (session), and ``make_pool(teams, controller=True)``: a
    namespace wired for Aviflow (Kueue queues per team, the run-store volume, the controller
    in this process, a ``KubernetesBackend``; its pods run in the built trainer image). See
    ``tests/k8s/aviflow_pool.py``.
``built_images``, ``bundles`` (session)
    The hub, notebook and trainer images built by ``images/build.sh`` (report rows), and
    each unpacked. See ``tests/images/aviflow_images.py``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from aviflow import _procs
from aviflow.backends.local import LocalBackend

# The real control plane (tests/cluster): `k8s_cluster` and `k8s_namespace` for every layer;
# Aviflow on it (tests/k8s/aviflow_pool.py): `crd_installed`, `make_pool`.
sys.path.insert(0, str(Path(__file__).resolve().parent / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "k8s"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "images"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "hub"))  # aviflow_kernel
pytest_plugins = ["aviflow_testcluster.pytest_plugin", "aviflow_images", "aviflow_pool"]


@pytest.fixture
def run_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("AVIFLOW_ROOT", str(root))
    monkeypatch.delenv("AVIFLOW_BACKEND", raising=False)
    return root


@pytest.fixture
def leftover_processes():
    def find(job_id: str) -> list[int]:
        return [p.pid for p in _procs.tagged(job_id)]

    return find


def _stop_jobs(root: Path) -> list[str]:
    """Cancel every unfinished job under ``root``; the ids of jobs that still had processes
    afterwards (those are then killed, so no test leaves any behind)."""
    backend = LocalBackend(root=root, capacity=1)
    stray = []
    for job_id in backend.list_ids():
        if not backend.run_dir(job_id).status().state.is_finished():
            backend.cancel(job_id)
        if _procs.tagged(job_id):
            stray.append(job_id)
            _procs.stop_job(job_id, [])
    return stray


@pytest.fixture(scope="session")
def stop_jobs() -> Callable[[Path], list[str]]:
    return _stop_jobs


@pytest.fixture
def local_backend(run_root: Path) -> Iterator[LocalBackend]:
    yield LocalBackend(root=run_root, capacity=8)
    stray = _stop_jobs(run_root)
    assert not stray, f"jobs left processes behind: {stray}"
