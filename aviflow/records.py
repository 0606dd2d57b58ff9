"""The typed records that cross every boundary: process, file, HTTP and ledger.

Each record has one serialization, ``to_dict()`` / ``from_dict()``, used in the run store's
files (``status.json``, ``events.jsonl``, ``failures/*.json``), on aviflow-api's wire, by
the ledger and in the TrainJob's status. Both are derived from the record's definition by
:mod:`aviflow.wire` (the fields' metadata says what a type and a default cannot), and so
are aviflow-api's OpenAPI schemas, the CRD's status schema and the JupyterLab extension's
TypeScript types (``make generate``). Keys are camelCase, as in the TrainJob spec and
Kubernetes objects. ``from_dict`` ignores keys it does not know (a newer writer may add
some), never guesses a missing required one and raises :class:`aviflow.wire.WireError` (a
ValueError) for a value it cannot read.

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

from aviflow import wire
from aviflow._queue_records import PendingJob as PendingJob  # re-exported
from aviflow._queue_records import QueueQuota as QueueQuota  # re-exported
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.wire import meta


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


_UNSET = meta(omit="empty")  # left out of the wire form when None or empty


@wire.record()
@dataclass(frozen=True)
class FailureInfo:
    """Why a rank (or a node) failed: written by a rank that raised (``failures/``), and, for
    a FAILED or RESTARTING job, the first failing rank the lifecycle attributed.

    ``exception`` is the exception's class name, ``"Signal"`` for a rank killed by a signal,
    or empty when only an exit code is known (then ``logTail`` has the node's last output).
    """

    rank: int | None = field(default=None, metadata=_UNSET)
    node: int | None = field(default=None, metadata=_UNSET)
    attempt: int = 0
    exception: str = field(
        default="", metadata=meta(omit="empty", doc="Exception class, 'Signal', or empty")
    )
    message: str = field(default="", metadata=_UNSET)
    traceback: str = field(default="", metadata=_UNSET)
    exit_code: int | None = field(
        default=None,
        metadata=meta(omit="empty", aliases=["exit_code"]),  # snake: before 0.2
    )
    log_tail: str = field(default="", metadata=meta(omit="empty", aliases=["log_tail"]))
    time: float | None = field(default=None, metadata=_UNSET)
    pid: int | None = field(default=None, metadata=_UNSET)

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
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FailureInfo:
        return wire.from_wire(cls, d)


@wire.record(order=("type", "attempt", "time"))
@dataclass(frozen=True)
class Event:
    """One line of a job's append-only event log."""

    type: EventType
    attempt: int = 0
    message: str = field(default="", metadata=_UNSET)
    time: float = field(default_factory=time.time, metadata=meta(required=True))
    data: dict[str, Any] = field(default_factory=dict, metadata=_UNSET)

    @property
    def failure(self) -> FailureInfo | None:
        """The failure an attempt-ending event carries (``data.failure``), if any."""
        found = self.data.get("failure")
        return FailureInfo.from_dict(found) if isinstance(found, Mapping) else None

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return wire.from_wire(cls, d)


_STATUS_ORDER = ("state", "attempt", "message", "updated", "queue_position", "expected_start")


@wire.record(
    order=(*_STATUS_ORDER, "wait", "failure"),
    doc="A job's current status (status.json, GET /jobs/{id}/status, the TrainJob's status)",
)
@dataclass(frozen=True)
class JobStatus:
    """A job's current status (``status.json``); the keys are listed in the module doc."""

    state: JobState = JobState.QUEUED
    attempt: int = field(
        default=0,
        metadata=meta(minimum=0, doc="0 while first queued, then 1, 2, ... (one per admission)"),
    )
    message: str = field(default="", metadata=_UNSET)
    updated: float | None = field(default=None, metadata=meta(omit="none", doc="Unix time"))
    queue_position: int | None = field(
        default=None, metadata=meta(omit="none", minimum=1, doc="1-based, while QUEUED")
    )
    failure: FailureInfo | None = field(
        default=None, metadata=meta(omit="none", doc="The first failing rank of a FAILED job")
    )
    expected_start: Estimate | None = field(
        default=None,
        metadata=meta(omit="none", doc="While QUEUED, when it is expected to start"),
    )
    wait: WaitNumbers | None = field(
        default=None,
        metadata=meta(omit="none", doc="While QUEUED, the numbers behind its wait"),
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobStatus:
        return wire.from_wire(cls, d)


@wire.record()
@dataclass(frozen=True, order=True)
class CheckpointRef:
    """A complete checkpoint: which job, which step. Where it lives is the reader's business
    (``RunStore.checkpoint_path(ref)`` against the reader's own mount of the run store)."""

    job_id: str = field(metadata=meta(key="job"))
    step: int
    time: float | None = field(default=None, compare=False, metadata=meta(omit="none"))
    attempt: int | None = field(default=None, compare=False, metadata=meta(omit="none"))

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CheckpointRef:
        return wire.from_wire(cls, d)


@dataclass(frozen=True)
class Owner:
    """Who a job belongs to: the submitting user and, through the hub, their team."""

    user: str
    team: str | None = None


@wire.record()
@dataclass(frozen=True)
class TrainerImage:
    """A trainer image a job may run in: an entry of the configured list (``--image NAME``)
    and what every job records at submission (``meta.json``'s ``image``).

    ``name``: what users pick it by; ``image``: the reference pods pull (empty for the local
    backend, whose jobs run in the submitting machine's Python); ``lockHash``: the dependency
    lock it was built from; ``packages``: versions of the packages a notebook should match
    (torch, accelerate, aviflow), by distribution name.
    """

    name: str = field(metadata=meta(missing="", doc="What --image picks it by"))
    image: str = field(
        default="",
        metadata=meta(
            doc="The reference pods pull ('' for the local backend: this machine's Python)"
        ),
    )
    lock_hash: str = field(default="", metadata=meta(doc="The dependency lock it was built from"))
    packages: Mapping[str, str] = field(
        default_factory=dict, metadata=meta(doc="torch, accelerate and aviflow versions")
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TrainerImage:
        return wire.from_wire(cls, d)

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


_ORIGIN = meta(schema={"$ref": "#/components/schemas/Origin"})
_LENIENT = meta(missing="")  # read as "" where absent


@wire.record(order=("id", "name", "user", "team"))
@dataclass(frozen=True)
class JobMeta:
    """What was recorded at submission (``meta.json``); never changes afterwards.

    ``user`` and ``team`` are who submitted, as whoever authenticated the submission recorded
    them (aviflow-api, the controller). ``origin`` is where the job says it comes from: the
    client's claim (:func:`origin_claim` on aviflow-api), never an identity, plus what the
    backend that recorded it adds (the Kubernetes ``namespace``; ``via: kubectl``)."""

    id: str
    name: str = field(metadata=_LENIENT)
    user: str = field(metadata=_LENIENT)
    submitted: float = field(metadata=meta(missing=0.0))
    team: str | None = None
    backend: str = ""
    code_hash: str = ""
    origin: dict[str, Any] = field(default_factory=dict, metadata=_ORIGIN)
    image: TrainerImage | None = field(  # the environment it runs in (None: not recorded)
        default=None,
        metadata=meta(omit="none", doc="The trainer image the job runs in, resolved at submission"),
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobMeta:
        return wire.from_wire(cls, d)


def _gpus(summary: JobSummary) -> int:
    return summary.gpus


@wire.record(
    order=("id", "name", "user", "team", "queue", "nodes", "gpus_per_node", "gpus"),
    computed={"gpus": wire.Computed(_gpus, int, doc="nodes x gpusPerNode")},
)
@dataclass(frozen=True)
class JobSummary:
    """One row of a job listing: everything a list view shows, in one record."""

    id: str
    name: str = field(metadata=_LENIENT)
    user: str = field(metadata=_LENIENT)
    team: str | None
    queue: str = field(metadata=meta(missing="", doc="Kueue LocalQueue name"))
    nodes: int
    gpus_per_node: int
    state: JobState
    attempt: int = 0
    message: str = ""
    queue_position: int | None = None
    submitted: float = field(default=0.0, metadata=meta(doc="Unix time"))
    updated: float | None = None
    finished: float | None = None
    gpu_seconds: float = field(
        default=0.0, metadata=meta(doc="Allocated GPU-seconds over all attempts")
    )
    failure: FailureInfo | None = field(default=None, metadata=meta(omit="none"))
    origin: dict[str, Any] = field(default_factory=dict, metadata=_ORIGIN)
    expected_start: Estimate | None = field(  # while QUEUED, as in JobStatus
        default=None, metadata=meta(omit="none")
    )
    wait: WaitNumbers | None = field(default=None, metadata=meta(omit="none"))

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> JobSummary:
        return wire.from_wire(cls, d)


@wire.record()
@dataclass(frozen=True)
class MetricRow:
    """One logged step: ``values`` maps metric names to numbers (or strings)."""

    step: int
    time: float
    attempt: int = field(metadata=meta(missing=1))
    values: dict[str, Any] = field(
        metadata=meta(
            missing={},
            schema={"type": "object", "additionalProperties": {"type": ["number", "string"]}},
        )
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricRow:
        return wire.from_wire(cls, d)


@wire.record()
@dataclass(frozen=True)
class LogChunk:
    """Part of one rank's log: ``text`` spans bytes ``[offset, next)`` of the log, whose size
    was ``size`` when read. Offsets count from the log's first byte, what rotation cut away
    included; ``next`` is where an incremental reader continues. An ``offset`` past the one
    asked for means the bytes between were rotated away; a ``next`` below it, that the log
    was cut (read its tail again)."""

    rank: int
    text: str = field(metadata=meta(missing="", doc="Bytes [offset, next) of the log, decoded"))
    offset: int = field(
        metadata=meta(
            missing=0,
            doc="Counted from the log's first byte, what rotation cut away included; past the "
            "offset asked for when the bytes between were rotated away",
        )
    )
    next: int = field(
        metadata=meta(
            missing=0,
            doc="Pass as `offset` to read on (at once while below `size`); below the offset "
            "asked for when the log was cut: read its tail again",
        )
    )
    size: int = field(
        metadata=meta(missing=0, doc="The log's size when read (what rotation cut away included)")
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LogChunk:
        return wire.from_wire(cls, d)
