"""The queue records (:class:`QueueQuota`, :class:`PendingJob`): a queue's quota, use and
waiting jobs as the backends report them; re-exported by :mod:`aviflow.records`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class PendingJob:
    """A job waiting in a queue, as a queue listing shows it."""

    id: str
    user: str
    position: int
    gpus: int

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "user": self.user, "position": self.position, "gpus": self.gpus}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PendingJob:
        return cls(str(d["id"]), str(d.get("user") or ""), int(d["position"]), int(d["gpus"]))


@dataclass(frozen=True)
class QueueQuota:
    """A queue's GPU quota and what it holds now (local backend, aviflow-api, Kueue).

    ``gpu_quota`` is the nominal quota (None: unlimited); ``borrowed`` is what the queue holds
    beyond it from its cohort; ``lendable`` the GPUs idle in its cohort that the other queues
    lend and it could borrow now (:func:`aviflow.estimate.cohort_lendable`; 0 without a
    cohort); ``pending`` lists the waiting jobs the reader may see, first in line first.
    """

    queue: str
    gpu_quota: int | None
    gpus_in_use: int = 0
    pending_count: int = 0
    team: str | None = None
    borrowed: int = 0
    pending: tuple[PendingJob, ...] = ()
    lendable: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "team": self.team,
            "gpuQuota": self.gpu_quota,
            "gpusInUse": self.gpus_in_use,
            "pendingCount": self.pending_count,
            "borrowed": self.borrowed,
            "lendable": self.lendable,
            "pending": [p.to_dict() for p in self.pending],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> QueueQuota:
        return cls(
            queue=str(d["queue"]),
            gpu_quota=_opt_int(d.get("gpuQuota")),
            gpus_in_use=int(d.get("gpusInUse") or 0),
            pending_count=int(d.get("pendingCount") or 0),
            team=d.get("team"),
            borrowed=int(d.get("borrowed") or 0),
            lendable=int(d.get("lendable") or 0),
            pending=tuple(PendingJob.from_dict(p) for p in d.get("pending") or ()),
        )
