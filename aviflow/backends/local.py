"""``LocalBackend``: every node of a job is a process group on this machine.

Jobs are started detached (a supervisor process per job, see :mod:`._supervisor`), so they
outlive the kernel or CLI that submitted them. A FIFO queue with ``capacity`` GPU slots
(``nodes x gpusPerNode`` per job) decides when a queued job starts; queues (``spec.queue``)
may have GPU quotas, which no queue's started jobs exceed together (see :mod:`._admission`).
The quotas live in the run store (``queues.json`` at its root), so every supervisor and every
submitter on that root applies the same ones.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from aviflow import _procs
from aviflow.backends._admission import Waiting
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import BackendError
from aviflow.spec import TrainJob
from aviflow.status import Event, JobState
from aviflow.store import RunDir, RunStore, atomic_write, read_json

DEFAULT_CAPACITY = 8
SUPERVISOR_LOCK = "supervisor.lock"
SUPERVISOR_INFO = "supervisor.json"
CANCEL_REQUEST = "cancel-requested"
QUOTAS_FILE = "queues.json"
# A job whose supervisor has not reported yet is still being submitted, not orphaned.
SUPERVISOR_START_GRACE = 60.0


def default_capacity() -> int:
    return int(os.environ.get("AVIFLOW_LOCAL_CAPACITY", DEFAULT_CAPACITY))


def read_quotas(root: Path) -> dict[str, int]:
    """GPU quota per queue of the run store at ``root`` (a queue not listed has none)."""
    return {str(k): int(v) for k, v in read_json(root / QUOTAS_FILE, {}).items()}


def scan_queues(
    store: RunStore,
    *,
    own: str | None = None,
    finished: set[str] | None = None,
    sizes: dict[str, tuple[str, int]] | None = None,
) -> tuple[list[Waiting], dict[str, int]]:
    """(queued jobs, oldest first; GPU slots held per queue by started jobs) of the jobs whose
    supervisor is alive (``own``: the caller's job, counted regardless). ``finished`` and
    ``sizes`` are caches a caller that scans repeatedly keeps (a finished job stays finished;
    a job's queue and size never change)."""
    finished = set() if finished is None else finished
    sizes = {} if sizes is None else sizes
    waiting: list[Waiting] = []
    in_use: dict[str, int] = {}
    for job_id in store.ids(exclude=finished):
        run = RunDir(store.root / job_id)
        state = JobState(run.status().get("state", JobState.QUEUED))
        if state.is_finished():
            finished.add(job_id)
            continue
        if job_id != own and not _procs.is_locked(run.path / SUPERVISOR_LOCK):
            continue  # its supervisor is gone (or not started yet); it holds nothing
        if job_id not in sizes:
            spec = run.spec().spec
            sizes[job_id] = (spec.queue, spec.total_gpus)
        queue, gpus = sizes[job_id]
        if state == JobState.QUEUED:
            waiting.append(Waiting(job_id, queue, gpus))
        else:
            in_use[queue] = in_use.get(queue, 0) + gpus
    return waiting, in_use


class LocalBackend(Backend):
    """Run jobs as local process groups; ``capacity`` is the number of GPU slots (processes).

    ``quotas`` (queue -> GPUs), when given, replaces the run store's queue quotas.
    """

    name = "local"

    def __init__(
        self,
        root: str | Path | None = None,
        capacity: int | None = None,
        quotas: dict[str, int] | None = None,
    ) -> None:
        self.store = RunStore(root)
        self.capacity = capacity if capacity is not None else default_capacity()
        if self.capacity < 1:
            raise BackendError(f"capacity must be at least 1 GPU slot, got {self.capacity}")
        if quotas is not None:
            bad = {q: n for q, n in quotas.items() if not isinstance(n, int) or n < 0}
            if bad:
                raise BackendError(f"queue quotas must be GPU counts >= 0, got {bad}")
            self.store.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.store.root / QUOTAS_FILE, json.dumps(quotas, sort_keys=True))

    def __repr__(self) -> str:
        return f"LocalBackend(root={str(self.store.root)!r}, capacity={self.capacity})"

    # -- the interface ---------------------------------------------------------------------------
    def submit(self, job: TrainJob, bundle: CodeBundle) -> str:
        need = job.spec.total_gpus
        if need > self.capacity:
            raise BackendError(
                f"{job.metadata.name!r} needs {need} GPU slots ({job.spec.nodes} nodes x "
                f"{job.spec.gpus_per_node}) but this local backend has {self.capacity}; "
                f"lower spec.nodes/gpusPerNode or raise AVIFLOW_LOCAL_CAPACITY"
            )
        quota = read_quotas(self.store.root).get(job.spec.queue)
        if quota is not None and need > quota:
            raise BackendError(
                f"{job.metadata.name!r} needs {need} GPUs but queue {job.spec.queue!r} has a "
                f"quota of {quota}; lower spec.nodes/gpusPerNode or use another queue"
            )
        meta = {
            "user": getpass.getuser(),
            "backend": self.name,
            "capacity": self.capacity,
            "code_hash": bundle.content_hash,
            "origin": bundle.origin,
        }
        run = self.store.create(job, bundle.store_files(), meta)
        run.record(Event(JobState.QUEUED, attempt=0, message="waiting for GPU slots"))
        try:
            self._start_supervisor(run)
        except BaseException:
            run.record(
                Event(
                    JobState.FAILED,
                    attempt=0,
                    message="the job supervisor did not start; see supervisor.log",
                )
            )
            raise
        return run.id

    def status(self, job_id: str) -> dict[str, Any]:
        run = self.store.get(job_id)
        status = run.status()
        state = JobState(status.get("state", JobState.QUEUED))
        if not state.is_finished() and not self._supervisor_alive(run) and not self._starting(run):
            status = run.status()  # it may have finished between the two reads
            if not JobState(status.get("state", JobState.QUEUED)).is_finished():
                self._reap_orphan(run)
                status = run.status()
        return status

    def cancel(self, job_id: str) -> bool:
        run = self.store.get(job_id)
        if JobState(self.status(job_id)["state"]).is_finished():
            return False
        (run.path / CANCEL_REQUEST).touch()
        info = read_json(run.path / SUPERVISOR_INFO, {})
        if info.get("pid") and self._supervisor_alive(run):
            try:
                os.kill(info["pid"], 15)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and self._supervisor_alive(run):
            time.sleep(0.1)
        if not JobState(run.status().get("state")).is_finished():
            self._reap_orphan(run, state=JobState.CANCELLED, message="cancelled")
        left = _procs.tagged(run.id)
        if left:
            raise BackendError(
                f"cancel of {run.id}: processes {[p.pid for p in left]} survived SIGKILL"
            )
        return True

    def list_ids(self) -> list[str]:
        return self.store.ids()

    def quota(self, queue: str) -> dict[str, int] | None:
        """The queue's GPU quota with its current use, or None if it has no quota."""
        quota = read_quotas(self.store.root).get(queue)
        if quota is None:
            return None
        waiting, in_use = scan_queues(self.store)
        return {
            "gpuQuota": quota,
            "gpusInUse": in_use.get(queue, 0),
            "pendingJobs": sum(w.queue == queue for w in waiting),
        }

    def run_dir(self, job_id: str) -> RunDir:
        return self.store.get(job_id)

    # -- helpers ---------------------------------------------------------------------------------
    def _start_supervisor(self, run: RunDir) -> None:
        log = open(run.path / "supervisor.log", "ab")  # noqa: SIM115
        try:
            intermediate = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aviflow.backends._supervisor",
                    str(run.path),
                    "--capacity",
                    str(self.capacity),
                    "--daemonize",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                close_fds=True,
                start_new_session=True,
            )
        finally:
            log.close()
        if intermediate.wait(timeout=30) != 0:
            raise BackendError(f"job supervisor failed to start; see {run.path / 'supervisor.log'}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if (run.path / SUPERVISOR_INFO).exists():
                return
            time.sleep(0.02)
        raise BackendError(
            f"job supervisor did not report in 30s; see {run.path / 'supervisor.log'}"
        )

    @staticmethod
    def _starting(run: RunDir) -> bool:
        """Submitted moments ago and its supervisor has not started yet."""
        if (run.path / SUPERVISOR_INFO).exists():
            return False
        return time.time() - run.meta().get("submitted", 0) < SUPERVISOR_START_GRACE

    @staticmethod
    def _supervisor_alive(run: RunDir) -> bool:
        return _procs.is_locked(run.path / SUPERVISOR_LOCK)

    def _reap_orphan(
        self,
        run: RunDir,
        state: JobState = JobState.FAILED,
        message: str = "the job supervisor exited unexpectedly; see supervisor.log",
    ) -> None:
        """The supervisor is gone but the job is not finished: stop what is left, record it."""
        lock = _procs.FileLock(run.path / SUPERVISOR_LOCK)
        if not lock.acquire(blocking=False):
            return  # a supervisor (or another reaper) is alive after all
        try:
            if JobState(run.status().get("state", JobState.QUEUED)).is_finished():
                return
            pgids = read_json(run.path / "processes.json", {}).get("pgids", [])
            _procs.stop_job(run.id, pgids)
            run.record(Event(state, attempt=run.status().get("attempt", 0), message=message))
        finally:
            lock.release()
