"""``LocalBackend``: every node of a job is a process group on this machine.

Jobs are started detached (a supervisor process per job, see :mod:`._supervisor`, which
drives the shared :mod:`aviflow.lifecycle`), so they outlive the kernel or CLI that
submitted them. A FIFO queue with ``capacity`` GPU slots (``nodes x gpusPerNode`` per job)
decides when a queued job starts; queues (``spec.queue``) may have GPU quotas, which no
queue's started jobs exceed together (see :mod:`._admission`). The quotas live in the run
store (``queues.json`` at its root), so every supervisor and every submitter on that root
applies the same ones. A job's rank logs are held within ``rank_log_cap`` (all its ranks
together), fixed when it is submitted: its supervisor passes each rank's share to the job's
runtime, whose launchers rotate the logs (:mod:`aviflow.store._logs`).

``status()`` is a plain read. A job whose supervisor died shows as FAILED at once, and
``reconcile()`` records it (stopping what is left of it); :meth:`LocalBackend.start` runs
``reconcile()`` in the background, as the hub's service does.

Making the backend is its start-up: it moves the jobs of an earlier layout of its store in
(:meth:`RunStore.migrate_legacy <aviflow.store.RunStore.migrate_legacy>`) before any read.

``cancel()`` asks the job's supervisor to stop it and waits until it has (a minute at most);
``request_cancel()`` only asks, for a server that must not wait (aviflow-api).
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from aviflow import _procs
from aviflow._model import StrictModel, explain
from aviflow.backends._admission import Waiting
from aviflow.backends._forecast import forecast
from aviflow.backends._store import StoreReads
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import BackendError, JobNotFound
from aviflow.estimate import DRY_RUN_ID, UNKNOWN, Estimate
from aviflow.estimate import Waiting as EstWaiting
from aviflow.images import pick, this_python
from aviflow.lifecycle import Lifecycle, Lost, Policy
from aviflow.paging import read_pages
from aviflow.records import JobState, JobStatus, Owner, PendingJob, QueueQuota, TrainerImage
from aviflow.runtime.env import RuntimeEnv
from aviflow.spec import TrainJob
from aviflow.store import (
    DEFAULT_JOB_LOG_CAP,
    RankLogCap,
    RunDir,
    RunStore,
    atomic_write,
    job_log_cap,
    rank_log_share,
    read_json,
)
from aviflow.usage import UsageSettings, usage_argv

DEFAULT_CAPACITY = 8
CAPACITY_ENV = "AVIFLOW_LOCAL_CAPACITY"
QUOTAS_FILE = "queues.json"
QUEUE_LOCK = ".queue.lock"
# A job whose supervisor has not reported yet is still being submitted, not orphaned.
SUPERVISOR_START_GRACE = 60.0
RECONCILE_SECONDS = 2.0
CANCEL_WAIT = 60.0  # seconds cancel() gives the supervisor to stop the job
ORPHAN_MESSAGE = "the job supervisor exited unexpectedly; see supervisor.log"


def default_capacity() -> int:
    return int(os.environ.get(CAPACITY_ENV, DEFAULT_CAPACITY))


def read_quotas(store: RunStore) -> dict[str, int]:
    """GPU quota per queue of ``store`` (a queue not listed has none)."""
    data = read_json(store.file(QUOTAS_FILE), {})
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def scan_queues(
    store: RunStore,
    *,
    own: str | None = None,
    finished: set[str] | None = None,
    sizes: dict[str, tuple[str, int, str]] | None = None,
    held: list[str] | None = None,
) -> tuple[list[Waiting], dict[str, int]]:
    """(queued jobs, oldest first; GPU slots held per queue by started jobs) of the jobs whose
    supervisor is alive (``own``: the caller's job, counted regardless). ``finished`` and
    ``sizes`` are caches a caller that scans repeatedly keeps (a finished job stays finished;
    a job's queue, size and owner never change); ``held`` gets the ids of the started jobs."""
    finished = set() if finished is None else finished
    sizes = {} if sizes is None else sizes
    waiting: list[Waiting] = []
    in_use: dict[str, int] = {}
    for job_id in store.ids():
        if job_id in finished:
            continue
        path = store.locate(job_id)
        if path is None:
            continue
        run = RunDir(path)
        state = run.status().state
        if state.is_finished():
            finished.add(job_id)
            continue
        if job_id != own and not _procs.is_locked(run.supervisor_lock):
            continue  # its supervisor is gone (or not started yet); it holds nothing
        if job_id not in sizes:
            spec = run.spec().spec
            sizes[job_id] = (spec.queue, spec.total_gpus, run.meta().user)
        queue, gpus, user = sizes[job_id]
        if state is JobState.QUEUED:
            waiting.append(Waiting(job_id, queue, gpus, user))
        else:
            in_use[queue] = in_use.get(queue, 0) + gpus
            if held is not None:
                held.append(job_id)
    return waiting, in_use


class LocalBackendSection(StrictModel):
    """Settings of the ``local`` backend (jobs as process groups on the service's machine)."""

    capacity: int = Field(
        DEFAULT_CAPACITY, ge=1, description="GPU slots (processes) the machine runs at once."
    )
    rank_log_cap: RankLogCap = DEFAULT_JOB_LOG_CAP
    usage: UsageSettings = Field(
        default_factory=UsageSettings,
        description="How often a running job's GPU/CPU use is recorded, and the idle rule "
        "(README: throughput and use).",
    )


class LocalBackend(StoreReads, Backend):
    """Run jobs as local process groups; ``capacity`` is the number of GPU slots (processes).

    ``quotas`` (queue -> GPUs), when given, replaces the run store's queue quotas.
    ``rank_log_cap``: the most one job's rank logs take, all ranks together (bytes or a
    quantity such as ``"8Gi"``; None: no cap); each rank's log is rotated at its share.
    ``usage``: how often a running job's use is recorded and the idle rule
    (:class:`aviflow.usage.UsageSettings`; default: every minute, no idle check).
    """

    name = "local"
    settings_model = LocalBackendSection

    @classmethod
    def config_section(
        cls, settings: BaseModel | None, *, run_root: Path, quotas: Mapping[str, int]
    ) -> dict[str, Any]:
        """Its settings as constructor arguments, its store the service's run root, and the
        teams' quotas, which then hold across concurrent jobs (as Kueue's ClusterQueues do
        on a cluster)."""
        section = (LocalBackendSection() if settings is None else settings).model_dump()
        return {**section, "root": str(run_root), "quotas": dict(quotas)}

    def __init__(
        self,
        root: str | Path | None = None,
        capacity: int | None = None,
        quotas: Mapping[str, int] | None = None,
        rank_log_cap: int | str | None = DEFAULT_JOB_LOG_CAP,
        usage: UsageSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.store = RunStore(root)
        try:
            self.usage = UsageSettings.from_value(usage)
        except ValidationError as exc:
            raise BackendError("usage: " + "; ".join(explain(exc, UsageSettings))) from None
        try:
            self.rank_log_cap = job_log_cap(rank_log_cap)
        except ValueError as exc:
            raise BackendError(f"rank_log_cap: {exc}") from None
        self.capacity = capacity if capacity is not None else default_capacity()
        if not isinstance(self.capacity, int) or self.capacity < 1:
            raise BackendError(f"capacity must be at least 1 GPU slot, got {self.capacity!r}")
        if quotas is not None:
            bad = {q: n for q, n in quotas.items() if not isinstance(n, int) or n < 0}
            if bad:
                raise BackendError(f"queue quotas must be GPU counts >= 0, got {bad}")
            self.store.root.mkdir(parents=True, exist_ok=True)
            atomic_write(self.store.file(QUOTAS_FILE), json.dumps(dict(quotas), sort_keys=True))
        self.store.migrate_legacy()  # this backend writes its store: its start-up migrates it
        self._stop = threading.Event()
        self._reconciler: threading.Thread | None = None

    def __repr__(self) -> str:
        return (
            f"LocalBackend(root={str(self.store.root)!r}, capacity={self.capacity}, "
            f"rank_log_cap={self.rank_log_cap})"
        )

    # -- the interface ---------------------------------------------------------------------------
    def images(self) -> list[TrainerImage]:
        """One: this machine's Python, which every job of this backend runs in."""
        return [this_python()]

    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        """Record the job and start its supervisor. With a ``job_id`` this owner submitted
        before, that job's id (a supervisor that died is reaped by :meth:`reconcile`)."""
        owner = owner or Owner(getpass.getuser())
        if job_id is not None and self.submitted_before(job_id, owner) is not None:
            return job_id
        if job.spec.secrets:
            raise BackendError(
                f"spec.secrets ({', '.join(job.spec.secrets)}) are Kubernetes Secrets of the "
                "team's namespace; this local backend has none: set the variables in --env, "
                "or submit to the cluster"
            )
        if job.spec.runtime is not None:
            raise BackendError(
                f"spec.runtime ({job.spec.runtime}) is a training runtime of a cluster (its "
                "devices, network and volumes); this local backend has none: drop it to run "
                "here, or submit to the cluster"
            )
        image = pick(self.images(), job.spec.image)
        need = job.spec.total_gpus
        if need > self.capacity:
            raise BackendError(
                f"{job.metadata.name!r} needs {need} GPU slots ({job.spec.nodes} nodes x "
                f"{job.spec.gpus_per_node}) but this local backend has {self.capacity}; "
                f"lower spec.nodes/gpusPerNode or raise {CAPACITY_ENV}"
            )
        quota = read_quotas(self.store).get(job.spec.queue)
        if quota is not None and need > quota:
            raise BackendError(
                f"{job.metadata.name!r} needs {need} GPUs but queue {job.spec.queue!r} has a "
                f"quota of {quota}; lower spec.nodes/gpusPerNode or use another queue"
            )
        run = self.store.create(
            job,
            bundle.store_files(),
            owner.user,
            team=owner.team,
            backend=self.name,
            code_hash=bundle.content_hash,
            origin=bundle.origin,
            image=image,
            job_id=job_id,
        )
        step = Lifecycle(Policy.from_spec(job.spec)).submitted(time.time(), "waiting for GPU slots")
        try:
            run.record(step.events, step.lifecycle.status())
        except BaseException:  # the store filled just after the job's directory appeared
            self.store.remove(run.id)  # refused whole: nothing of it is left
            raise
        try:
            self._start_supervisor(run)
        except BaseException:
            lost = step.lifecycle.observe(
                Lost(time.time(), "the job supervisor did not start; see supervisor.log")
            )
            run.record(lost.events, lost.lifecycle.status())
            raise
        return run.id

    def status(self, job_id: str) -> JobStatus:
        run = self.run_dir(job_id)
        status = run.status()
        if status.state.is_finished() or self._alive_or_starting(run):
            return status
        status = run.status()  # it may have finished between the two reads
        if status.state.is_finished():
            return status
        return replace(status, state=JobState.FAILED, message=ORPHAN_MESSAGE, queue_position=None)

    def reconcile(self, job_ids: Iterable[str] | None = None) -> list[str]:
        """Record the end of every unfinished job whose supervisor died, stopping its
        leftover processes; return their ids."""
        reaped = []
        for job_id in self.list_ids() if job_ids is None else job_ids:
            try:
                run = self.run_dir(job_id)
            except JobNotFound:
                continue
            if run.status().state.is_finished() or self._alive_or_starting(run):
                continue
            if self._reap_orphan(run):
                reaped.append(job_id)
        return reaped

    def start(self) -> None:
        """Reconcile in a background thread every couple of seconds (until :meth:`stop`)."""
        if self._reconciler is not None:
            return
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(RECONCILE_SECONDS):
                try:
                    self.reconcile()
                except Exception as exc:  # keep reconciling through one bad read
                    print(f"aviflow local backend: reconcile failed: {exc!r}", file=sys.stderr)

        self._reconciler = threading.Thread(target=loop, name="aviflow-reconcile", daemon=True)
        self._reconciler.start()

    def stop(self) -> None:
        self._stop.set()
        if self._reconciler is not None:
            self._reconciler.join(timeout=10)
            self._reconciler = None

    def cancel(self, job_id: str, by: str | None = None) -> bool:
        run = self.run_dir(job_id)
        if run.status().state.is_finished():
            return False
        if not self._alive_or_starting(run):  # it ended (its supervisor died) before the cancel
            self._reap_orphan(run)
            return False
        self._ask_supervisor(run, by)
        deadline = time.monotonic() + CANCEL_WAIT
        while time.monotonic() < deadline and _procs.is_locked(run.supervisor_lock):
            time.sleep(0.1)
        if not run.status().state.is_finished():
            self._reap_orphan(run, cancelled=True)
        left = _procs.tagged(run.id)
        if left:
            raise BackendError(
                f"cancel of {run.id}: processes {[p.pid for p in left]} survived SIGKILL"
            )
        return True

    def request_cancel(self, job_id: str, by: str | None = None) -> bool:
        """Leave the cancel request in the job's directory and signal its supervisor, which
        stops the job and records ``CANCELLED``; False if the job had already finished (a
        job whose supervisor died has: :meth:`reconcile` records it)."""
        run = self.run_dir(job_id)
        if run.status().state.is_finished() or not self._alive_or_starting(run):
            return False
        self._ask_supervisor(run, by)
        return True

    def quota(self, queue: str) -> QueueQuota | None:
        """The queue's GPU quota with its current use, or None if it has no quota."""
        quota = read_quotas(self.store).get(queue)
        if quota is None:
            return None
        waiting, in_use = scan_queues(self.store)
        return _queue_quota(queue, quota, waiting, in_use)

    def queues(self) -> list[QueueQuota]:
        quotas = read_quotas(self.store)
        if not quotas:
            return []
        waiting, in_use = scan_queues(self.store)
        return [_queue_quota(q, n, waiting, in_use) for q, n in sorted(quotas.items())]

    def forecast(self, job: TrainJob) -> Estimate | None:
        held: list[str] = []
        waiting, _ = scan_queues(self.store, held=held)
        limit = job.spec.time_limit_seconds
        me = EstWaiting(DRY_RUN_ID, job.spec.queue, job.spec.total_gpus,
                        (0.0, float(limit) if limit is not None else UNKNOWN))  # fmt: skip
        quotas = read_quotas(self.store)
        found, _ = forecast(self.store, waiting, held, quotas, self.capacity, time.time(), extra=me)
        return found[DRY_RUN_ID]

    def render(self, job: TrainJob) -> list[dict[str, Any]]:
        """What each node would run: the runtime's argv and environment (the run directory
        and port are chosen at submission)."""
        out = []
        for node in range(job.spec.nodes):
            env = RuntimeEnv(
                run_dir=Path("<run-dir>"),
                node_rank=node,
                num_nodes=job.spec.nodes,
                main_port=0,
                keep_last=job.spec.checkpoints.keep_last,
                job_tag="<job-id>",
                rank_log_bytes=rank_log_share(self.rank_log_cap, job.spec.total_gpus),
            )
            out.append(
                {
                    "node": node,
                    "argv": [sys.executable, "-m", "aviflow.runtime"],
                    "env": {**job.spec.env, **env.to_env()},
                    "processes": job.spec.gpus_per_node,
                }
            )
        return out

    # -- helpers ---------------------------------------------------------------------------------
    def _start_supervisor(self, run: RunDir) -> None:
        log = open(run.supervisor_log, "ab")  # noqa: SIM115
        try:
            intermediate = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "aviflow.backends._supervisor",
                    str(run.path),
                    "--capacity",
                    str(self.capacity),
                    "--rank-log-cap",
                    str(self.rank_log_cap or 0),
                    *usage_argv(self.usage),
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
            raise BackendError(f"job supervisor failed to start; see {run.supervisor_log}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if run.supervisor_info.exists():
                return
            time.sleep(0.02)
        raise BackendError(f"job supervisor did not report in 30s; see {run.supervisor_log}")

    @staticmethod
    def _alive_or_starting(run: RunDir) -> bool:
        """Its supervisor holds the lock, or it was submitted moments ago and its supervisor
        has not started yet."""
        if _procs.is_locked(run.supervisor_lock):
            return True
        if run.supervisor_info.exists():
            return False
        try:
            submitted = run.meta().submitted
        except JobNotFound:
            return False
        return time.time() - submitted < SUPERVISOR_START_GRACE

    @staticmethod
    def _ask_supervisor(run: RunDir, by: str | None) -> None:
        """The cancel request (who asked) in the job's directory, and SIGTERM to its
        supervisor (one not started yet reads the request when it starts)."""
        atomic_write(run.cancel_request, f"cancelled by {by or getpass.getuser()}".encode())
        info = read_json(run.supervisor_info, {})
        if info.get("pid") and _procs.is_locked(run.supervisor_lock):
            try:
                os.kill(info["pid"], 15)
            except ProcessLookupError:
                pass

    def _reap_orphan(self, run: RunDir, cancelled: bool = False) -> bool:
        """The supervisor is gone but the job is not finished: stop what is left, record it
        (as cancelled when a cancel was asked for: its supervisor died on the way)."""
        lock = _procs.FileLock(run.supervisor_lock)
        if not lock.acquire(blocking=False):
            return False  # a supervisor (or another reaper) is alive after all
        try:
            if run.status().state.is_finished():
                return False
            pgids = read_json(run.processes_path, {}).get("pgids", [])
            _procs.stop_job(run.id, pgids)
            lc = Lifecycle.from_events(
                Policy.from_spec(run.spec().spec), read_pages(run.events).items
            )
            asked = run.cancel_reason()
            cancelled = cancelled or asked is not None
            message = (asked or "cancelled") if cancelled else ORPHAN_MESSAGE
            step = lc.observe(Lost(time.time(), message, cancelled=cancelled))
            run.record(step.events, step.lifecycle.status())
            return True
        finally:
            lock.release()


def _queue_quota(
    queue: str, quota: int, waiting: list[Waiting], in_use: dict[str, int]
) -> QueueQuota:
    pending = [w for w in waiting if w.queue == queue]
    return QueueQuota(
        queue=queue,
        gpu_quota=quota,
        gpus_in_use=in_use.get(queue, 0),
        pending_count=len(pending),
        pending=tuple(
            PendingJob(w.id, w.user, position=i + 1, gpus=w.gpus) for i, w in enumerate(pending)
        ),
    )
