"""The queue records (:class:`QueueQuota`, :class:`PendingJob`): a queue's quota, use and
waiting jobs as the backends report them; re-exported by :mod:`aviflow.records`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aviflow import wire
from aviflow.wire import meta


@wire.record()
@dataclass(frozen=True)
class PendingJob:
    """A job waiting in a queue, as a queue listing shows it."""

    id: str
    user: str = field(metadata=meta(missing=""))
    position: int
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingJob:
        return wire.from_wire(cls, d)


@wire.record(order=("queue", "team"))
@dataclass(frozen=True)
class QueueQuota:
    """A queue's GPU quota and what it holds now (local backend, aviflow-api, Kueue).

    ``gpu_quota`` is the nominal quota (None: unlimited); ``borrowed`` is what the queue holds
    beyond it from its cohort; ``lendable`` the GPUs idle in its cohort that the other queues
    lend and it could borrow now (:func:`aviflow.estimate.cohort_lendable`; 0 without a
    cohort); ``pending`` lists the waiting jobs the reader may see.
    """

    queue: str
    gpu_quota: int | None
    gpus_in_use: int = 0
    pending_count: int = 0
    team: str | None = None
    borrowed: int = field(
        default=0,
        metadata=meta(
            doc="GPUs held beyond the quota (from the cohort), as the backend last reported "
            "them (Kueue's ClusterQueue status; 0 elsewhere)"
        ),
    )
    pending: tuple[PendingJob, ...] = ()
    lendable: int = field(
        default=0,
        metadata=meta(doc="GPUs idle in the cohort that the queue could borrow now"),
    )

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> QueueQuota:
        return wire.from_wire(cls, d)
