"""The typed records that cross every boundary: process, file, HTTP and ledger.

Each record has one serialization, ``to_dict()`` / ``from_dict()``, used in the run store's
files (``status.json``, ``events.jsonl``, ``failures/*.json``), on aviflow-api's wire and
by the ledger. Keys are camelCase, as in the TrainJob spec and Kubernetes objects.
``from_dict`` ignores keys it does not know (a newer writer may add some) and never
guesses a missing required one.

The status keys (``status.json``, ``GET /jobs/{id}/status``; see :class:`JobStatus`)::

    state          QUEUED | STARTING | RUNNING | SUCCEEDED | FAILED | CANCELLED
    attempt        0 while queued the first time, then 1, 2, ... (one per admission)
    message        why the job is where it is ("waiting for 4 GPU slots ...", "rank 1 failed")
    updated        when the status last changed (Unix seconds)
    queuePosition  1-based position among waiting jobs, while QUEUED (else absent)
    expectedStart  while QUEUED, when it is expected to start: {low, high, never, assumed}
                   (Unix seconds; high null: no bound; see aviflow.estimate), else absent
    wait           while QUEUED, the numbers behind the wait: {queue, quota, holds, borrowed,
                   lendable, ahead, aheadGpus} (see aviflow.estimate.WaitNumbers), else absent
    failure        the first failing rank of a FAILED job (a FailureInfo), else absent

>>> JobStatus.from_dict({"state": "RUNNING", "attempt": 2}).state.is_active()
True
>>> EventType.PREEMPTED.ends_attempt()
True
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aviflow._queue_records import PendingJob as PendingJob  # re-exported
from aviflow._queue_records import QueueQuota as QueueQuota  # re-exported
from aviflow.estimate import Estimate, WaitNumbers


class JobState(StrEnum):
    """Where a job is. Finished states are final."""

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


class EventType(StrEnum):
    """The types of a job's lifecycle events: every state, and how an attempt ends.

    ``RESTARTING``: a rank failed and the whole group restarts from the latest checkpoint
    (counts against ``maxRestarts``). ``EVICTED``: the attempt lost its admission (a node
    went away, an admin drained it); ``PREEMPTED``: a higher-priority or borrowing-back
    workload took its quota. Both requeue the job without counting against ``maxRestarts``.
    ``USAGE`` and ``IDLE`` (:mod:`aviflow.usage`) are the driver's notes on a running attempt.
    """

    QUEUED = "QUEUED"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    RESTARTING = "RESTARTING"
    EVICTED = "EVICTED"
    PREEMPTED = "PREEMPTED"
    USAGE = "USAGE"
    IDLE = "IDLE"

    def ends_attempt(self) -> bool:
        """Whether an event of this type ends the attempt that is running."""
        return self in _ENDS_ATTEMPT

    def state(self) -> JobState | None:
        """The job state this event moves the job to (None: it is not a state)."""
        return JobState(self.value) if self.value in JobState.__members__ else None


_ENDS_ATTEMPT = frozenset(
    {
        EventType.RESTARTING,
        EventType.EVICTED,
        EventType.PREEMPTED,
        EventType.SUCCEEDED,
        EventType.FAILED,
        EventType.CANCELLED,
    }
)
# Failures that are consequences of another rank failing first (see aviflow.failures).
_COMM_TYPES = frozenset({"DistBackendError", "DistNetworkError", "DistStoreError", "DistError"})
_COMM_TEXT = re.compile(
    r"gloo|nccl|connection (closed|reset) by peer|broken pipe|socket timeout|timed out|"
    r"processgroup|collective operation timeout|watchdog",
    re.IGNORECASE,
)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass(frozen=True)
class FailureInfo:
    """Why a rank (or a node) failed: written by a rank that raised (``failures/``), and, for
    a FAILED or RESTARTING job, the first failing rank the lifecycle attributed.

    ``exception`` is the exception's class name, ``"Signal"`` for a rank killed by a signal,
    or empty when only an exit code is known (then ``logTail`` has the node's last output).
    """

    rank: int | None = None
    node: int | None = None
    attempt: int = 0
    exception: str = ""
    message: str = ""
    traceback: str = ""
    exit_code: int | None = None
    log_tail: str = ""
    time: float | None = None
    pid: int | None = None

    def is_communication_error(self) -> bool:
        """A consequence of a peer failing (gloo/NCCL errors), not a root cause."""
        return self.exception in _COMM_TYPES or bool(_COMM_TEXT.search(self.message))

    def where(self) -> str:
        """``rank 1 on node 0``, ``node 1`` or ``a process``."""
        if self.rank is not None:
            return f"rank {self.rank}" + (f" on node {self.node}" if self.node is not None else "")
        return f"node {self.node}" if self.node is not None else "a process"

    def what(self) -> str:
        """``ValueError: boom``, ``exit code 3`` or ``""``."""
        head = self.exception or (
            f"exit code {self.exit_code}" if self.exit_code is not None else ""
        )
        return f"{head}: {self.message}" if self.message and head else (head or self.message)

    def detail(self) -> str:
        """The traceback, else the last lines of output."""
        return self.traceback or self.log_tail

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "rank": self.rank,
            "node": self.node,
            "attempt": self.attempt,
            "exception": self.exception,
            "message": self.message,
            "traceback": self.traceback,
            "exitCode": self.exit_code,
            "logTail": self.log_tail,
            "time": self.time,
            "pid": self.pid,
        }
        return {k: v for k, v in out.items() if v is not None and v != ""}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FailureInfo:
        return cls(
            rank=_opt_int(d.get("rank")),
            node=_opt_int(d.get("node")),
            attempt=int(d.get("attempt") or 0),
            exception=str(d.get("exception") or ""),
            message=str(d.get("message") or ""),
            traceback=str(d.get("traceback") or ""),
            exit_code=_opt_int(d.get("exitCode", d.get("exit_code"))),  # snake: before 0.2
            log_tail=str(d.get("logTail") or d.get("log_tail") or ""),
            time=_opt_float(d.get("time")),
            pid=_opt_int(d.get("pid")),
        )


@dataclass(frozen=True)
class Event:
    """One line of a job's append-only event log."""

    type: EventType
    attempt: int = 0
    message: str = ""
    time: float = field(default_factory=time.time)
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def failure(self) -> FailureInfo | None:
        """The failure an attempt-ending event carries (``data.failure``), if any."""
        found = self.data.get("failure")
        return FailureInfo.from_dict(found) if isinstance(found, Mapping) else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type.value, "attempt": self.attempt, "time": self.time}
        if self.message:
            out["message"] = self.message
        if self.data:
            out["data"] = self.data
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return cls(
            type=EventType(d["type"]),
            attempt=int(d.get("attempt") or 0),
            message=str(d.get("message") or ""),
            time=float(d["time"]),
            data=dict(d.get("data") or {}),
        )


@dataclass(frozen=True)
class JobStatus:
    """A job's current status (``status.json``); the keys are listed in the module doc."""

    state: JobState = JobState.QUEUED
    attempt: int = 0
    message: str = ""
    updated: float | None = None
    queue_position: int | None = None
    failure: FailureInfo | None = None
    expected_start: Estimate | None = None
    wait: WaitNumbers | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state.value, "attempt": self.attempt}
        if self.message:
            out["message"] = self.message
        if self.updated is not None:
            out["updated"] = self.updated
        if self.queue_position is not None:
            out["queuePosition"] = self.queue_position
        if self.expected_start is not None:
            out["expectedStart"] = self.expected_start.to_dict()
        if self.wait is not None:
            out["wait"] = self.wait.to_dict()
        if self.failure is not None:
            out["failure"] = self.failure.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobStatus:
        failure = d.get("failure")
        return cls(
            state=JobState(d.get("state") or JobState.QUEUED),
            attempt=int(d.get("attempt") or 0),
            message=str(d.get("message") or ""),
            updated=_opt_float(d.get("updated")),
            queue_position=_opt_int(d.get("queuePosition")),
            failure=FailureInfo.from_dict(failure) if isinstance(failure, Mapping) else None,
            expected_start=Estimate.from_dict(d.get("expectedStart")),
            wait=WaitNumbers.from_dict(d.get("wait")),
        )


@dataclass(frozen=True, order=True)
class CheckpointRef:
    """A complete checkpoint: which job, which step. Where it lives is the reader's business
    (``RunStore.checkpoint_path(ref)`` against the reader's own mount of the run store)."""

    job_id: str
    step: int
    time: float | None = field(default=None, compare=False)
    attempt: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"job": self.job_id, "step": self.step}
        if self.time is not None:
            out["time"] = self.time
        if self.attempt is not None:
            out["attempt"] = self.attempt
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckpointRef:
        return cls(
            job_id=str(d["job"]),
            step=int(d["step"]),
            time=_opt_float(d.get("time")),
            attempt=_opt_int(d.get("attempt")),
        )


@dataclass(frozen=True)
class Owner:
    """Who a job belongs to: the submitting user and, through the hub, their team."""

    user: str
    team: str | None = None


@dataclass(frozen=True)
class TrainerImage:
    """A trainer image a job may run in: an entry of the configured list (``--image NAME``)
    and what every job records at submission (``meta.json``'s ``image``).

    ``name``: what users pick it by; ``image``: the reference pods pull (empty for the local
    backend, whose jobs run in the submitting machine's Python); ``lockHash``: the dependency
    lock it was built from; ``packages``: versions of the packages a notebook should match
    (torch, accelerate, aviflow), by distribution name.
    """

    name: str
    image: str = ""
    lock_hash: str = ""
    packages: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "lockHash": self.lock_hash,
            "packages": dict(self.packages),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainerImage:
        packages = d.get("packages") or {}
        return cls(
            name=str(d.get("name") or ""),
            image=str(d.get("image") or ""),
            lock_hash=str(d.get("lockHash") or ""),
            packages={str(k): str(v) for k, v in packages.items()},
        )

    def describe(self) -> str:
        """``name (reference, lock hash)``, as messages name it."""
        where = ", ".join(x for x in (self.image, self.lock_hash and f"lock {self.lock_hash}") if x)
        return f"{self.name} ({where})" if where else self.name


# What a client may say about where a job comes from (``origin``): the notebook and cell that
# launched it, as ``aviflow_magics``' ``make_origin`` writes it. Each key: its type and its
# largest size (characters for text, the value for a count).
ORIGIN_CLAIM: dict[str, tuple[type, int]] = {
    "kind": (str, 64),  # "notebook-cell"
    "notebook": (str, 4096),  # the notebook's path, as the kernel knows it
    "cell_id": (str, 8192),  # nbformat: 1 to 64 characters; VS Code: a URI with the path
    "execution_count": (int, 2**31 - 1),
    "cell_hash": (str, 128),  # "sha256:<hex>" of the cell's source
}


def origin_claim(raw: Mapping[str, Any]) -> dict[str, Any]:
    """What is recorded of the ``origin`` a client sends about itself: the keys of
    :data:`ORIGIN_CLAIM`, each of its type and size (or null), and nothing else. It is the
    client's claim, shown to help find the cell again and never trusted: who submitted is
    :attr:`JobMeta.user` and :attr:`JobMeta.team`, recorded by whoever authenticated the
    submission, so an identity in the claim (``user``, ``team``, ``hub``), a ``namespace``
    or a value of the wrong type or size is dropped.

    >>> origin_claim({"notebook": "a.ipynb", "cell_id": "c1", "execution_count": 3,
    ...               "cell_hash": 7, "user": "carol", "hub": {"user": "carol"}})
    {'notebook': 'a.ipynb', 'cell_id': 'c1', 'execution_count': 3}
    """
    out: dict[str, Any] = {}
    for key, (kind, limit) in ORIGIN_CLAIM.items():
        if key not in raw:
            continue
        value: Any = raw[key]
        if value is None or (
            type(value) is kind  # not isinstance(): True is not a count
            and isinstance(value, str | int)
            and 0 <= (len(value) if isinstance(value, str) else value) <= limit
        ):
            out[key] = value
    return out


@dataclass(frozen=True)
class JobMeta:
    """What was recorded at submission (``meta.json``); never changes afterwards.

    ``user`` and ``team`` are who submitted, as whoever authenticated the submission recorded
    them (aviflow-api, the controller). ``origin`` is where the job says it comes from: the
    client's claim (:func:`origin_claim` on aviflow-api), never an identity, plus what the
    backend that recorded it adds (the Kubernetes ``namespace``; ``via: kubectl``)."""

    id: str
    name: str
    user: str
    submitted: float
    team: str | None = None
    backend: str = ""
    code_hash: str = ""
    origin: dict[str, Any] = field(default_factory=dict)
    image: TrainerImage | None = None  # the environment it runs in (None: not recorded)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "team": self.team,
            "submitted": self.submitted,
            "backend": self.backend,
            "codeHash": self.code_hash,
            "origin": self.origin,
        }
        if self.image is not None:
            out["image"] = self.image.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobMeta:
        return cls(
            id=str(d["id"]),
            name=str(d.get("name") or ""),
            user=str(d.get("user") or ""),
            submitted=float(d.get("submitted") or 0.0),
            team=d.get("team"),
            backend=str(d.get("backend") or ""),
            code_hash=str(d.get("codeHash") or ""),
            origin=dict(d.get("origin") or {}),
            image=TrainerImage.from_dict(d["image"])
            if isinstance(d.get("image"), Mapping)
            else None,
        )


@dataclass(frozen=True)
class JobSummary:
    """One row of a job listing: everything a list view shows, in one record."""

    id: str
    name: str
    user: str
    team: str | None
    queue: str
    nodes: int
    gpus_per_node: int
    state: JobState
    attempt: int = 0
    message: str = ""
    queue_position: int | None = None
    submitted: float = 0.0
    updated: float | None = None
    finished: float | None = None
    gpu_seconds: float = 0.0
    failure: FailureInfo | None = None
    origin: dict[str, Any] = field(default_factory=dict)
    expected_start: Estimate | None = None  # while QUEUED, as in JobStatus
    wait: WaitNumbers | None = None

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "user": self.user,
            "team": self.team,
            "queue": self.queue,
            "nodes": self.nodes,
            "gpusPerNode": self.gpus_per_node,
            "gpus": self.gpus,
            "state": self.state.value,
            "attempt": self.attempt,
            "message": self.message,
            "queuePosition": self.queue_position,
            "submitted": self.submitted,
            "updated": self.updated,
            "finished": self.finished,
            "gpuSeconds": self.gpu_seconds,
            "origin": self.origin,
        }
        if self.failure is not None:
            out["failure"] = self.failure.to_dict()
        if self.expected_start is not None:
            out["expectedStart"] = self.expected_start.to_dict()
        if self.wait is not None:
            out["wait"] = self.wait.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSummary:
        failure = d.get("failure")
        return cls(
            id=str(d["id"]),
            name=str(d.get("name") or ""),
            user=str(d.get("user") or ""),
            team=d.get("team"),
            queue=str(d.get("queue") or ""),
            nodes=int(d["nodes"]),
            gpus_per_node=int(d["gpusPerNode"]),
            state=JobState(d["state"]),
            attempt=int(d.get("attempt") or 0),
            message=str(d.get("message") or ""),
            queue_position=_opt_int(d.get("queuePosition")),
            submitted=float(d.get("submitted") or 0.0),
            updated=_opt_float(d.get("updated")),
            finished=_opt_float(d.get("finished")),
            gpu_seconds=float(d.get("gpuSeconds") or 0.0),
            failure=FailureInfo.from_dict(failure) if isinstance(failure, Mapping) else None,
            origin=dict(d.get("origin") or {}),
            expected_start=Estimate.from_dict(d.get("expectedStart")),
            wait=WaitNumbers.from_dict(d.get("wait")),
        )


@dataclass(frozen=True)
class MetricRow:
    """One logged step: ``values`` maps metric names to numbers (or strings)."""

    step: int
    time: float
    attempt: int
    values: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "time": self.time,
            "attempt": self.attempt,
            "values": self.values,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricRow:
        return cls(
            step=int(d["step"]),
            time=float(d["time"]),
            attempt=int(d.get("attempt") or 1),
            values=dict(d.get("values") or {}),
        )


@dataclass(frozen=True)
class LogChunk:
    """Part of one rank's log: ``text`` spans bytes ``[offset, next)`` of the log, whose size
    was ``size`` when read. Offsets count from the log's first byte, what rotation cut away
    included; ``next`` is where an incremental reader continues. An ``offset`` past the one
    asked for means the bytes between were rotated away; a ``next`` below it, that the log
    was cut (read its tail again)."""

    rank: int
    text: str
    offset: int
    next: int
    size: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "text": self.text,
            "offset": self.offset,
            "next": self.next,
            "size": self.size,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogChunk:
        return cls(
            rank=int(d["rank"]),
            text=str(d.get("text") or ""),
            offset=int(d.get("offset") or 0),
            next=int(d.get("next") or 0),
            size=int(d.get("size") or 0),
        )
