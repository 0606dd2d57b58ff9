"""Job states and the events that move a job between them."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any


class JobState(StrEnum):
    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    def is_finished(self) -> bool:
        return self in _FINISHED

    def is_active(self) -> bool:
        """Holds capacity: starting or running."""
        return self in (JobState.STARTING, JobState.RUNNING)


_FINISHED = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})

# Event types besides the states: an attempt ended and the whole group restarts.
RESTARTING = "RESTARTING"


@dataclass(frozen=True)
class Event:
    """One line of a job's append-only event log."""

    type: str
    attempt: int = 0
    message: str = ""
    time: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        return cls(
            type=d["type"],
            attempt=d.get("attempt", 0),
            message=d.get("message", ""),
            time=d["time"],
            data=d.get("data") or {},
        )


@dataclass(frozen=True)
class Usage:
    """Allocated GPU time: nodes x gpusPerNode x running time, summed over attempts."""

    gpus: int
    attempts: int
    running_seconds: float

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * self.running_seconds

    @property
    def gpu_hours(self) -> float:
        return self.gpu_seconds / 3600


_ENDS_ATTEMPT = frozenset({RESTARTING, *(s.value for s in _FINISHED)})


def usage_from_events(events: list[Event], gpus: int, now: float | None = None) -> Usage:
    """Sum the time from each attempt's STARTING to its end (or ``now`` while it runs)."""
    running = 0.0
    started: float | None = None
    attempts = 0
    for ev in events:
        if ev.type == JobState.STARTING:
            started, attempts = ev.time, max(attempts, ev.attempt)
        elif started is not None and ev.type in _ENDS_ATTEMPT:
            running += ev.time - started
            started = None
    if started is not None:
        running += (now if now is not None else time.time()) - started
    return Usage(gpus=gpus, attempts=attempts, running_seconds=running)
