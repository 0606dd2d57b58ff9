"""The controller's forecast: when each queued TrainJob is expected to start.

Every ``queued_tick`` the controller's ticker calls :meth:`PoolForecast.refresh`: it reads
the ClusterQueues (their limits and use; cached :data:`CQ_TTL` seconds), the jobs holding
GPUs (its TrainJob cache; how long each has held them, from its run directory's events, as
the controller's :class:`~aviflow.store.EventsCache` has them: unchanged, not read again;
when each releases them, by the pace of the steps it logged toward a declared total,
:mod:`aviflow.pace`, else after as long as the user's earlier successful runs of its cell
held theirs, :mod:`aviflow.history`, else for the part of its time limit the pool's recent
runs that held theirs as long held, else by its time limit) and the queued ones in Kueue's order (its
visibility API, as the queue positions; each holding its GPUs, once started, as
:func:`~aviflow.windows.run_window` says), and replays admission forward
(:mod:`aviflow.estimate`). Admission itself takes time (Kueue's cycle, a reclaim's
preemption): the forecast measures, for the jobs it told "fits now", how long they then
waited, and puts the latest start of a job that fits at once that far off: the 90th
percentile of the last :data:`DELAYS` of those waits. GPUs a ClusterQueue's status counts that no
Aviflow job holds (plain Kueue Jobs) are a holding with no known end. Each queued job's
estimate reaches its status (:mod:`._status`); it is replaced only when it moved by a
minute or a tenth of the wait, so a status is not rewritten every tick. The snapshot goes to
the run store (``.pool.json``) for aviflow-api's dry runs.

A ClusterQueue the controller may not read (no ``clusterqueues`` rule) leaves its jobs with
no estimate; nothing else depends on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Container, Sequence
from typing import TYPE_CHECKING, Any

from aviflow.errors import AviflowError
from aviflow.estimate import (
    UNKNOWN,
    Estimate,
    Holding,
    Waiting,
    WaitNumbers,
    estimate,
    wait_numbers,
)
from aviflow.history import CellHistory
from aviflow.k8s import manifests as m
from aviflow.k8s.forecast import (
    KUEUE_REQUEUE,
    POOL_FILE,
    cq_usage,
    queue_limits,
    snapshot_dict,
)
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION
from aviflow.pace import PaceCache, current_start
from aviflow.records import Event
from aviflow.spec import TrainJob
from aviflow.store import RunDir, atomic_write
from aviflow.windows import Share, run_window

if TYPE_CHECKING:
    from aviflow.operator._controller import Controller

log = logging.getLogger("aviflow.operator")

DELAYS = 50  # the admission delays measured that the forecast keeps
CQ_TTL = 10.0  # seconds the ClusterQueues and LocalQueues read are reused
ASSUMED = (
    "running jobs end at the pace of the steps they logged toward a declared total, else "
    "after as long as their cell's earlier successful runs took",
    "running jobs with neither end within the part of their time limit the pool's recent "
    "successful runs with a limit like theirs (half to twice) that held theirs as long held "
    "(10th to 90th percentile), else by their time limit, else at an unknown time",
    "GPUs held by jobs Aviflow does not run end at an unknown time",
    "waiting jobs, once started, hold their GPUs as long as their cell's earlier successful "
    "runs did, else for the part of their time limit the pool's recent successful runs with "
    "a limit like theirs (half to twice) held (10th to 90th percentile), else up to their "
    "time limit",
    "a job a release lets in is admitted within a second of it (Kueue requeues the waiting "
    "Workloads in batches)",
)
Forecast = tuple[Estimate | None, WaitNumbers | None]


def _moved(old: Estimate | None, new: Estimate, now: float) -> bool:
    """Whether ``new`` says something ``old`` did not (another bound, or a bound moved by a
    minute and a tenth of the wait)."""
    if old is None or (old.never, old.now, old.high is None) != (
        new.never,
        new.now,
        new.high is None,
    ):
        return True
    for a, b in ((old.low, new.low), (old.high, new.high)):
        if a is None or b is None:
            if a != b:
                return True
            continue
        if abs(a - b) >= max(60.0, 0.1 * abs(b - now)):
            return True
    return False


class AdmissionDelays:
    """How long the jobs told "fits now" then waited for their admission: the last
    :data:`DELAYS` of those waits. Used by the forecast's one thread (its ticker).

    >>> d = AdmissionDelays()
    >>> d.told(["a", "b"], {"a", "b"}, now=10.0)
    >>> d.told(["a"], {"a"}, now=12.0)  # b went (cancelled); a keeps its first "now"
    >>> d.admitted("a", 13.5), d.admitted("b", 14.0), d.p90()
    (None, None, 3.5)
    """

    def __init__(self) -> None:
        self._told: dict[str, float] = {}  # job id -> when it was first told "now"
        self._waits: deque[float] = deque(maxlen=DELAYS)

    def told(self, now_ids: list[str], waiting: Container[str], now: float) -> None:
        """``now_ids`` were told they fit at once; jobs no longer ``waiting`` nor told are
        dropped (cancelled, or ended while they waited)."""
        for gone in [i for i in self._told if i not in waiting]:
            del self._told[gone]
        for job_id in now_ids:
            self._told.setdefault(job_id, now)

    def admitted(self, job_id: str, at: float) -> None:
        """``job_id`` holds GPUs since ``at``: its wait counts if it was told "now"."""
        said = self._told.pop(job_id, None)
        if said is not None:
            self._waits.append(max(0.0, at - said))

    def p90(self) -> float:
        """The 90th percentile of the waits kept (0 before any): what "now" has meant on
        this cluster lately."""
        found = sorted(self._waits)
        return found[int(0.9 * (len(found) - 1))] if found else 0.0


class PoolForecast:
    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._lock = threading.Lock()
        self._found: dict[str, Forecast] = {}
        self._cqs: tuple[float, dict[str, Any]] = (0.0, {})
        self._lqs: dict[tuple[str, str], tuple[float, str | None]] = {}
        self._denied = False
        self.delays = AdmissionDelays()
        self.paces = PaceCache()  # the running jobs' paces, their metrics read as they grow
        self.history = CellHistory(ctl.store)  # their cells' earlier runs, each read once

    def get(self, job_id: str) -> Forecast:
        with self._lock:
            return self._found.get(job_id, (None, None))

    def refresh(self, now: float | None = None) -> None:
        """Recompute every queued job's forecast (errors are logged: it is advice)."""
        try:
            self._refresh(time.time() if now is None else now)
        except Exception as exc:
            log.warning("forecast: %r", exc)

    def _cluster_queues(self, now: float) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        at, cqs = self._cqs
        if now - at < CQ_TTL:
            return cqs
        try:
            found: Any = self.ctl.custom.list_cluster_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", _request_timeout=10
            )
            items = found["items"]
        except ApiException as exc:
            if exc.status == 403 and not self._denied:
                self._denied = True
                log.warning("forecast: the controller may not list ClusterQueues: no estimates")
            return cqs
        cqs = {cq["metadata"]["name"]: cq for cq in items}
        self._cqs = (now, cqs)
        return cqs

    def _cluster_queue_of(self, ns: str, lq: str, now: float) -> str | None:
        from kubernetes.client.exceptions import ApiException

        cached = self._lqs.get((ns, lq))
        if cached is not None and now - cached[0] < CQ_TTL * 30:
            return cached[1]
        try:
            obj: Any = self.ctl.custom.get_namespaced_custom_object(
                KUEUE_GROUP, KUEUE_VERSION, ns, "localqueues", lq, _request_timeout=10
            )
            cq = (obj.get("spec") or {}).get("clusterQueue")
        except ApiException:
            cq = None
        self._lqs[(ns, lq)] = (now, cq)
        return cq

    def _held(
        self, run: RunDir, job: TrainJob, now: float, shares: Sequence[Share],
        tail: tuple[float, float] = (0.0, 0.0),
    ) -> tuple[tuple[float, float], float | None]:  # fmt: skip
        """When the job releases its GPUs (``shares``: the part of their limits the pool's
        recent runs held; ``tail``: how long they held them after their last row), and
        when its current attempt was admitted."""
        try:  # what the job's reconciles read already: an unchanged file is not read again
            events: tuple[Event, ...] = self.ctl.events.of(run)
        except (AviflowError, OSError, ValueError):
            events = ()
        earlier = self.history.of(run, now)
        limit = job.spec.time_limit_seconds
        window, _ = self.paces.release(run, events, limit, now, earlier, shares, tail)
        start = current_start(events)
        return window, start.time if start is not None else None

    def _refresh(self, now: float) -> None:
        cqs = self._cluster_queues(now)
        if not cqs:
            return
        gpu = self.ctl.settings.gpu_resource
        live = {cr["metadata"]["name"] for cell in self.ctl.cells.values()
                for cr in cell.trainjobs.by("active")}  # fmt: skip
        shares = self.history.shares(now, live)  # the part of their limits recent runs held
        tail = self.history.tail()  # and how long after their last row
        holding: list[Holding] = []
        queued: list[tuple[int, str, Waiting]] = []
        queues: dict[str, str] = {}
        for ns, cell in self.ctl.cells.items():
            for cr in cell.trainjobs.by("active"):
                job_id = cr["metadata"]["name"]
                try:  # the spec the job was submitted with (the controller's own source)
                    path = self.ctl.store.locate(job_id)
                    if path is None:
                        continue
                    run = RunDir(path)
                    job = run.spec()
                except (AviflowError, OSError, ValueError):
                    continue
                cq = self._cluster_queue_of(ns, job.spec.queue, now)
                if cq is None or cq not in cqs:
                    continue
                queues[job.spec.queue] = cq
                state = (cr.get("status") or {}).get("state") or "QUEUED"
                if state in ("STARTING", "RUNNING"):
                    window, admitted = self._held(run, job, now, shares, tail)
                    holding.append(Holding(job_id, cq, job.spec.total_gpus, window))
                    if admitted is not None:
                        self.delays.admitted(job_id, admitted)
                elif state == "QUEUED":
                    attempt = int((cr.get("status") or {}).get("attempt") or 0) + 1
                    positions = self.ctl.reads.positions(ns, job.spec.queue)
                    # its Workload (named by Kueue) belongs to the attempt's Job
                    position = next(
                        (positions[wl["metadata"]["name"]]
                         for wl in cell.workloads.by(m.attempt_name(job_id, attempt))
                         if wl["metadata"]["name"] in positions),
                        1 << 30,
                    )  # fmt: skip
                    earlier = self.history.of(run, now)  # its cell's runs, else its limit
                    runs_for = run_window(job.spec.time_limit_seconds, earlier, shares)
                    queued.append((position, cr["metadata"].get("creationTimestamp", ""),
                                   Waiting(job_id, cq, job.spec.total_gpus, runs_for)))  # fmt: skip
        for name, cq in cqs.items():  # GPUs held by what Aviflow does not run
            other = cq_usage(cq, gpu) - sum(h.gpus for h in holding if h.queue == name)
            if other > 0:
                holding.append(Holding(f"(others in {name})", name, other, (now, UNKNOWN)))
        waiting = [w for _, _, w in sorted(queued, key=lambda q: (q[0], q[1]))]
        limits = [queue_limits(cq, gpu) for cq in cqs.values()]
        # each queue reclaims by its own setting (QueueLimits.reclaim); the snapshot's
        # pool-wide flag, for a reader of a queue without one: whether all in cohorts do
        reclaim = all(q.reclaim for q in limits if q.cohort is not None)
        found = estimate(
            now, limits, holding, waiting, reclaim=reclaim, assumed=ASSUMED,
            admission_delay=self.delays.p90(), requeue=KUEUE_REQUEUE,
        )  # fmt: skip
        self.delays.told([w.id for w in waiting if found[w.id].now], found, now)
        with self._lock:
            old = self._found
            self._found = {}
            for w in waiting:
                est = found[w.id]
                kept = old.get(w.id, (None, None))[0]
                est = kept if kept is not None and not _moved(kept, est, now) else est
                self._found[w.id] = (est, wait_numbers(w, limits, holding, waiting))
        snap = snapshot_dict(now, limits, holding, waiting, queues, reclaim)
        try:
            atomic_write(self.ctl.store.root / POOL_FILE, json.dumps(snap))
        except OSError as exc:
            log.warning("forecast: cannot write %s: %r", POOL_FILE, exc)
