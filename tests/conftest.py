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
``make_job``
    ``make_job(state, nodes=2, gpus_per_node=2, metrics=0, checkpoints=(), failure=None,
    queue_position=None, user="tester")`` writes a job into the run store the way the
    supervisor and the runtime do (status, events, metrics, checkpoints, failure records,
    rank logs) and, for an unfinished state, holds the supervisor lock as a live supervisor
    would. Returns a :class:`~aviflow.job.Job` on ``local_backend``.
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

import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aviflow import _procs
from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.job import Job
from aviflow.records import Event, EventType, FailureInfo, JobState, JobStatus, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import CHECKPOINT_MARKER, atomic_write

# The real control plane (tests/cluster): `k8s_cluster` and `k8s_namespace` for every layer;
# Aviflow on it (tests/k8s/aviflow_pool.py): `crd_installed`, `make_pool`.
sys.path.insert(0, str(Path(__file__).resolve().parent))  # aviflow_layers: markers, times
sys.path.insert(0, str(Path(__file__).resolve().parent / "cluster"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "k8s"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "images"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "hub"))  # aviflow_kernel
sys.path.insert(0, str(Path(__file__).resolve().parent / "extensions"))  # aviflow_jupyter_server
pytest_plugins = [
    "aviflow_layers",
    "aviflow_testcluster.pytest_plugin",
    "aviflow_images",
    "aviflow_pool",
]


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


def _spec(name: str, nodes: int, gpus_per_node: int) -> TrainJob:
    return TrainJob.from_dict(
        {
            "apiVersion": "aviflow.dev/v1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"nodes": nodes, "gpusPerNode": gpus_per_node, "script": "print('hi')\n"},
        }
    )


@pytest.fixture
def make_job(local_backend: LocalBackend) -> Iterator[Any]:
    locks: list[_procs.FileLock] = []

    def make(
        state: JobState,
        *,
        name: str = "fab",
        nodes: int = 2,
        gpus_per_node: int = 2,
        metrics: int = 0,
        checkpoints: tuple[int, ...] = (),
        failure: FailureInfo | None = None,
        queue_position: int | None = None,
        log_lines: int = 3,
        origin: dict | None = None,
        user: str = "tester",
    ) -> Job:
        job = _spec(name, nodes, gpus_per_node)
        bundle = build_bundle(job, origin=origin or {})
        run = local_backend.store.create(
            job,
            bundle.store_files(),
            user,
            backend="local",
            code_hash=bundle.content_hash,
            origin=bundle.origin,
        )
        if not state.is_finished():
            lock = _procs.FileLock(run.supervisor_lock)
            assert lock.acquire(blocking=False)
            locks.append(lock)
        t0 = time.time() - 120
        meta = json.loads(run.meta_path.read_text())
        run.meta_path.write_text(json.dumps({**meta, "submitted": t0}))
        queued = Event(EventType.QUEUED, 0, "waiting for GPU slots", t0)
        run.record([queued], JobStatus(JobState.QUEUED, 0, queued.message, t0, queue_position))
        if state is not JobState.QUEUED:
            run.record(
                [
                    Event(EventType.STARTING, 1, "starting", t0 + 1),
                    Event(EventType.RUNNING, 1, "running", t0 + 2),
                ],
                JobStatus(JobState.RUNNING, 1, "running", t0 + 2),
            )
            for rank in range(nodes * gpus_per_node):
                path = run.rank_log(rank)
                path.write_text("".join(f"rank {rank} line {i}\n" for i in range(log_lines)))
        for step in range(1, metrics + 1):
            run.append_metric(
                MetricRow(
                    step, t0 + 2 + step * 0.01, 1, {"loss": 1.0 / step, "lr": 0.1 / (1 + step % 7)}
                )
            )
        for step in checkpoints:
            d = run.checkpoint_dir(step)
            d.mkdir(parents=True)
            atomic_write(
                d / CHECKPOINT_MARKER, json.dumps({"step": step, "time": t0 + 3, "attempt": 1})
            )
        if state is JobState.FAILED:
            data = {"failure": failure.to_dict()} if failure else {}
            run.record(
                [Event(EventType.FAILED, 1, "rank 3 failed", t0 + 60, data)],
                JobStatus(JobState.FAILED, 1, "rank 3 failed", t0 + 60, failure=failure),
            )
        elif state.is_finished():
            run.record(
                [Event(EventType(state.value), 1, "done", t0 + 60)],
                JobStatus(state, 1, "done", t0 + 60),
            )
        return Job(run.id, local_backend)

    yield make
    for lock in locks:
        lock.release()


@pytest.fixture
def rank_process() -> Callable[[str, int], Any]:
    """``rank_process(job_id, rank)`` -> the psutil process of that rank of a local job (the
    one running ``aviflow.runtime.rank`` with that ``RANK``); LookupError if none."""

    def find(job_id: str, rank: int) -> Any:
        for proc in _procs.tagged(job_id):
            cmdline = " ".join(proc.cmdline())
            if proc.environ().get("RANK") == str(rank) and "aviflow.runtime.rank" in cmdline:
                return proc
        raise LookupError(rank)

    return find
