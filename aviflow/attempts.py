"""Attempts and usage, derived purely from a job's event log: one implementation for the
``Job.usage()`` a user reads, the lifecycle's ``timeLimit`` and the hub's ledger.

An attempt is admitted at its ``STARTING`` event (GPUs are allocated from then on), starts
running at ``RUNNING`` and ends at an event whose type ends an attempt (``RESTARTING``,
``EVICTED``, ``PREEMPTED``, ``SUCCEEDED``, ``FAILED``, ``CANCELLED``). Allocated
GPU-seconds are ``gpus x (finished - admitted)``, summed over attempts; ``gpus`` is what
the admission reserved where the queue says (``STARTING``'s ``data.gpus``), else the spec's.

On Kubernetes the controller takes these times from the attempt's Kueue Workload: admitted
at its ``Admitted`` transition, ended at ``Finished`` or, after an eviction, when Kueue
released the quota; :func:`admission_drift` cross-checks such a segment against Kueue's
``accumulatedPastExecutionTimeSeconds``.

*Used* time: the driver's ``USAGE`` events (:mod:`aviflow.usage`) carry the attempt's mean
utilization; each holds for the span since the previous one (or the attempt's ``RUNNING``), so
``busy_seconds / use_seconds`` is the attempt's mean utilization over its measured running time,
and used GPU-seconds are allocated GPU-seconds x that mean (:meth:`AttemptRecord.used_seconds`).
``use_kind`` says what was measured: ``"gpu"`` (NVML utilization) or, on a pool without GPUs,
``"cpu"`` (the ranks' CPU utilization of their cores): CPU-based "used" time is reported as
such, never as GPU time. An ``IDLE`` event sets ``idle``.

An attempt ended by an external stop is a *preemption*: a ``PREEMPTED`` or ``EVICTED``
event, or a node killed by SIGKILL/SIGTERM without any rank reporting an exception.

Folding is incremental: :func:`fold_attempts` continues from the records it returned
before, so a reader that keeps them only reads the events that are new.

>>> from aviflow.records import Event, EventType as E
>>> info = JobInfo("j", "alice", None, "default", nodes=1, gpus=2, submitted=0.0)
>>> events = [Event(E.QUEUED, 0, time=0.0), Event(E.STARTING, 1, time=5.0),
...           Event(E.RUNNING, 1, time=6.0), Event(E.SUCCEEDED, 1, time=15.0)]
>>> [(a.attempt, a.outcome, a.gpu_seconds(now=99.0)) for a in attempts_from_events(info, events)]
[(1, 'SUCCEEDED', 20.0)]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from aviflow import wire
from aviflow.records import Event, EventType, FailureInfo, JobMeta, JobStatus, JobSummary

if TYPE_CHECKING:
    from aviflow.spec import TrainJob

RESTARTED = "RESTARTED"
PREEMPTED = "PREEMPTED"
EVICTED = "EVICTED"
RUNNING = "RUNNING"
_KILL_CODES = frozenset({-9, -15, 137, 143})


@dataclass(frozen=True)
class JobInfo:
    """What accounting needs to know about a job besides its events."""

    job_id: str
    user: str
    team: str | None
    queue: str
    nodes: int
    gpus: int
    submitted: float
    name: str = ""


@wire.record(keys="snake")
@dataclass(frozen=True)
class AttemptRecord:
    """One attempt of one job: the ledger's row, and the unit of usage. Its wire form (the
    ledger's columns, ``GET /usage?by=attempt``) keeps the fields' names as keys."""

    job_id: str
    attempt: int
    user: str
    team: str | None
    queue: str
    nodes: int
    gpus: int
    submitted: float
    admitted: float
    started: float | None
    finished: float | None
    outcome: (
        str  # RUNNING until it ends; then SUCCEEDED/FAILED/CANCELLED/RESTARTED/PREEMPTED/EVICTED
    )
    restarts: int
    preempted: bool
    queue_wait: float
    use_kind: str | None = None  # "gpu" | "cpu": what the USAGE events measured
    use_seconds: float = 0.0  # running seconds covered by USAGE events
    busy_seconds: float = 0.0  # those seconds x utilization (0..1)
    idle: bool = False  # flagged idle (an IDLE event)

    def mean_util(self) -> float | None:
        """Mean utilization in percent over the measured running time (None: unmeasured)."""
        if self.use_seconds <= 0:
            return None
        return min(100.0, max(0.0, 100.0 * self.busy_seconds / self.use_seconds))

    def used_seconds(self, now: float) -> float | None:
        """Allocated GPU-seconds x mean utilization (None: unmeasured)."""
        util = self.mean_util()
        return None if util is None else self.gpu_seconds(now) * util / 100.0

    def allocated_seconds(self, now: float) -> float:
        return max((self.finished if self.finished is not None else now) - self.admitted, 0.0)

    def gpu_seconds(self, now: float) -> float:
        return self.gpus * self.allocated_seconds(now)

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> AttemptRecord:
        return wire.from_wire(cls, d)


@dataclass(frozen=True)
class Usage:
    """Allocated GPU time: nodes x gpusPerNode x time held, summed over attempts."""

    gpus: int
    attempts: int
    running_seconds: float
    used_seconds: float | None = None  # allocated x mean utilization, measured attempts only
    used_kind: str | None = None  # "gpu" | "cpu": what was measured (the latest attempt's)

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.running_seconds

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


def is_preemption(event: Event) -> bool:
    """Whether ``event`` ends its attempt by an external stop rather than by the job."""
    if event.type in (EventType.PREEMPTED, EventType.EVICTED):
        return True
    if event.type not in (EventType.RESTARTING, EventType.FAILED):
        return False
    failure = event.failure
    return (
        failure is not None
        and failure.exit_code in _KILL_CODES
        and not failure.exception
        and failure.rank is None
    )


def _outcome(event: Event) -> str:
    if event.type is EventType.RESTARTING:
        return PREEMPTED if is_preemption(event) else RESTARTED
    return event.type.value


def admitted_gpus(start: Event, default: int) -> int:
    """The GPUs a ``STARTING`` event says the queue reserved (``data.gpus``, from the
    Kueue admission's resource usage), else ``default`` (the spec's count)."""
    n = start.data.get("gpus")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else default


def admission_drift(events: Sequence[Event], end: Event) -> float | None:
    """Seconds by which the segment the events give ``end``'s attempt (its ``STARTING`` to
    ``end``) exceeds the queue's own count (``data.admittedSeconds`` on ``end``); None where
    the queue gave no count. Kueue counts whole seconds, so up to 1 s either way is exact."""
    kueue = end.data.get("admittedSeconds")
    if not isinstance(kueue, (int, float)) or isinstance(kueue, bool):
        return None
    start = next(
        (e for e in events if e.type is EventType.STARTING and e.attempt == end.attempt), None
    )
    if start is None:
        return None
    return (end.time - start.time) - float(kueue)


def fold_attempts(
    job: JobInfo, attempts: Sequence[AttemptRecord], events: Iterable[Event]
) -> list[AttemptRecord]:
    """``attempts`` (what an earlier fold returned, or empty) continued with ``events``."""
    out = list(attempts)
    current = out[-1] if out and out[-1].finished is None else None
    previous_end = next(
        (a.finished for a in reversed(out) if a.finished is not None), job.submitted
    )
    for ev in events:
        if ev.type is EventType.STARTING:
            if current is not None:  # no end was recorded: the new admission ends it
                out[-1] = replace(current, finished=ev.time, outcome=RESTARTED)
                previous_end = ev.time
            current = AttemptRecord(
                job_id=job.job_id,
                attempt=ev.attempt,
                user=job.user,
                team=job.team,
                queue=job.queue,
                nodes=job.nodes,
                gpus=admitted_gpus(ev, job.gpus),
                submitted=job.submitted,
                admitted=ev.time,
                started=None,
                finished=None,
                outcome=RUNNING,
                restarts=max(ev.attempt - 1, 0),
                preempted=False,
                queue_wait=max(ev.time - previous_end, 0.0),
            )
            out.append(current)
        elif current is None:
            continue
        elif ev.type is EventType.RUNNING:
            if current.started is None:
                out[-1] = current = replace(current, started=ev.time)
        elif ev.type is EventType.USAGE and ev.attempt == current.attempt:
            out[-1] = current = _measured(current, ev)
        elif ev.type is EventType.IDLE and ev.attempt == current.attempt:
            out[-1] = current = replace(current, idle=True)
        elif ev.type.ends_attempt():
            out[-1] = replace(
                current, finished=ev.time, outcome=_outcome(ev), preempted=is_preemption(ev)
            )
            current = None
            previous_end = ev.time
    return out


def _measured(a: AttemptRecord, ev: Event) -> AttemptRecord:
    """``a`` with the span up to ``ev`` (a USAGE event) at its utilization."""
    util, kind = ev.data.get("util"), ev.data.get("kind")
    if isinstance(util, bool) or not isinstance(util, int | float) or not 0 <= util <= 100:
        return a
    if kind not in ("gpu", "cpu"):
        return a
    measured_to = (a.started if a.started is not None else a.admitted) + a.use_seconds
    span = max(ev.time - measured_to, 0.0)
    return replace(
        a,
        use_kind=str(kind),
        use_seconds=a.use_seconds + span,
        busy_seconds=a.busy_seconds + span * float(util) / 100.0,
    )


def attempts_from_events(job: JobInfo, events: Iterable[Event]) -> list[AttemptRecord]:
    """The job's attempts in order; the last one is open (``finished`` None) while it runs."""
    return fold_attempts(job, [], events)


def usage(attempts: Sequence[AttemptRecord], gpus: int, now: float) -> Usage:
    """Usage of a job with ``gpus`` GPUs from its attempts (open ones count up to ``now``)."""
    measured = [(a, a.used_seconds(now)) for a in attempts if a.use_kind is not None]
    used = [u for _, u in measured if u is not None]
    return Usage(
        gpus=gpus,
        attempts=max((a.attempt for a in attempts), default=0),
        running_seconds=sum(a.allocated_seconds(now) for a in attempts),
        used_seconds=sum(used) if used else None,
        used_kind=measured[-1][0].use_kind if measured else None,
    )


def usage_from_events(events: Iterable[Event], gpus: int, now: float) -> Usage:
    """:func:`usage` of the attempts ``events`` describe."""
    info = JobInfo("", "", None, "", nodes=1, gpus=gpus, submitted=0.0)
    return usage(attempts_from_events(info, events), gpus, now)


def held_seconds(events: Iterable[Event], now: float) -> float:
    """Seconds the job has held its GPUs, over all attempts (what ``timeLimit`` bounds)."""
    return usage_from_events(events, 1, now).running_seconds


def last_failure(events: Iterable[Event]) -> FailureInfo | None:
    """The failure carried by the latest event that has one."""
    found = None
    for ev in events:
        found = ev.failure or found
    return found


def job_info(meta: JobMeta, spec: TrainJob) -> JobInfo:
    """What accounting needs of a job, from its meta and spec."""
    return JobInfo(
        job_id=meta.id,
        user=meta.user,
        team=meta.team,
        queue=spec.spec.queue,
        nodes=spec.spec.nodes,
        gpus=spec.spec.total_gpus,
        submitted=meta.submitted,
        name=meta.name,
    )


def finished_at(events: Sequence[Event]) -> float | None:
    """When the job reached a finished state, if it did."""
    for ev in reversed(events):
        state = ev.type.state()
        if state is not None:
            return ev.time if state.is_finished() else None
    return None


def summarize(
    meta: JobMeta, spec: TrainJob, status: JobStatus, events: Sequence[Event], now: float
) -> JobSummary:
    """A job's list-view record from its meta, spec, status and events."""
    info = job_info(meta, spec)
    return JobSummary(
        id=meta.id,
        name=meta.name,
        user=meta.user,
        team=meta.team,
        queue=spec.spec.queue,
        nodes=spec.spec.nodes,
        gpus_per_node=spec.spec.gpus_per_node,
        state=status.state,
        attempt=status.attempt,
        message=status.message,
        queue_position=status.queue_position,
        submitted=meta.submitted,
        updated=status.updated,
        finished=finished_at(events) if status.state.is_finished() else None,
        gpu_seconds=usage(attempts_from_events(info, events), info.gpus, now).gpu_seconds,
        failure=status.failure,
        origin=meta.origin,
        expected_start=status.expected_start,
        wait=status.wait,
    )
