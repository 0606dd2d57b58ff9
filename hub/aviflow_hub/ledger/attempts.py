"""One accounting record per job attempt, derived purely from a job's event log.

An attempt is admitted at its ``STARTING`` event (GPUs are allocated from then on), starts
running at ``RUNNING`` and ends at ``RESTARTING``, ``SUCCEEDED``, ``FAILED`` or ``CANCELLED``.
Allocated GPU-seconds are ``gpus x (finished - admitted)``, the same quantity as
:func:`aviflow.status.usage_from_events`.

An attempt ended by an external stop is a *preemption*: an end event whose data says
``preempted: true`` or ``reason: Preempted|Evicted`` (the Kubernetes backend), or a node that
was killed by SIGKILL/SIGTERM without any rank reporting an exception (the local backend).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from aviflow.status import RESTARTING, Event, JobState

ENDS_ATTEMPT = frozenset({RESTARTING, JobState.SUCCEEDED.value, JobState.FAILED.value,
                          JobState.CANCELLED.value})
RESTARTED = "RESTARTED"
PREEMPTED = "PREEMPTED"
_KILL_CODES = frozenset({-9, -15, 137, 143})


@dataclass(frozen=True)
class JobInfo:
    """What the ledger knows about a job besides its events."""

    job_id: str
    user: str
    team: str | None
    queue: str
    nodes: int
    gpus: int
    submitted: float
    name: str = ""


@dataclass(frozen=True)
class AttemptRecord:
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
    outcome: str  # RUNNING until it ends; then SUCCEEDED/FAILED/CANCELLED/RESTARTED/PREEMPTED
    restarts: int
    preempted: bool
    queue_wait: float

    def allocated_seconds(self, now: float) -> float:
        return (self.finished if self.finished is not None else now) - self.admitted

    def gpu_seconds(self, now: float) -> float:
        return self.gpus * self.allocated_seconds(now)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def is_preemption(event: Event) -> bool:
    data = event.data or {}
    if data.get("preempted") is True or data.get("reason") in ("Preempted", "Evicted"):
        return True
    return event.type in (RESTARTING, JobState.FAILED) and data.get("exit_code") in _KILL_CODES \
        and "exception" not in data


def attempts_from_events(job: JobInfo, events: Iterable[Event]) -> list[AttemptRecord]:
    """The job's attempts in order; the last one is open (``finished`` None) while it runs."""
    out: list[AttemptRecord] = []
    current: AttemptRecord | None = None
    previous_end = job.submitted
    for ev in events:
        if ev.type == JobState.STARTING:
            if current is not None and current.finished is None:  # no end was recorded
                out[-1] = current = replace(current, finished=ev.time, outcome=RESTARTED)
                previous_end = ev.time
            current = AttemptRecord(
                job_id=job.job_id, attempt=ev.attempt, user=job.user, team=job.team,
                queue=job.queue, nodes=job.nodes, gpus=job.gpus, submitted=job.submitted,
                admitted=ev.time, started=None, finished=None, outcome=JobState.RUNNING.value,
                restarts=max(ev.attempt - 1, 0), preempted=False,
                queue_wait=max(ev.time - previous_end, 0.0),
            )
            out.append(current)
        elif current is None or current.finished is not None:
            continue
        elif ev.type == JobState.RUNNING:
            if current.started is None:
                out[-1] = current = replace(current, started=ev.time)
        elif ev.type in ENDS_ATTEMPT:
            preempted = is_preemption(ev)
            outcome = ev.type if ev.type != RESTARTING else (PREEMPTED if preempted else RESTARTED)
            out[-1] = current = replace(current, finished=ev.time, outcome=outcome, preempted=preempted)
            previous_end = ev.time
    return out


def job_state(events: Iterable[Event]) -> str:
    """The latest state in the log (QUEUED when there is none)."""
    state = JobState.QUEUED.value
    for ev in events:
        if ev.type in JobState.__members__:
            state = ev.type
    return state
