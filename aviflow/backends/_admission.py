"""Admission of queued local jobs: machine GPU slots shared by queues with GPU quotas.

The local backend's stand-in for Kueue's ClusterQueues (strict FIFO) in one cohort (the
machine): each queue admits its jobs in submission order, never holding more than its quota
at once; across queues, the oldest job that its own quota allows goes first, and it starts
once the machine has the slots. A job held back by its queue's quota does not block other
queues. Pure: the supervisor reads the run store, this decides.

>>> w = [Waiting("a2", "a", 2), Waiting("b1", "b", 2)]
>>> decide("b1", w, in_use={"a": 2}, capacity=8, quotas={"a": 2}).admit
True
>>> decide("a2", w, in_use={"a": 2}, capacity=8, quotas={"a": 2}).reason
"waiting for queue 'a' quota: needs 2 GPUs, 2/2 in use (position 1)"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Waiting:
    """A queued job: id, queue, GPU slots it needs (nodes x gpusPerNode), its owner."""

    id: str
    queue: str
    gpus: int
    user: str = ""


@dataclass(frozen=True)
class Verdict:
    admit: bool
    position: int | None  # 1-based among all waiting jobs, oldest first
    reason: str


def decide(
    job_id: str,
    waiting: Sequence[Waiting],
    in_use: Mapping[str, int],
    capacity: int,
    quotas: Mapping[str, int],
) -> Verdict:
    """Whether ``job_id`` starts now. ``waiting``: queued jobs, oldest first; ``in_use``:
    GPU slots held per queue by started jobs; ``quotas``: GPUs per queue (absent: no quota)."""
    index = next((i for i, w in enumerate(waiting) if w.id == job_id), None)
    if index is None:
        return Verdict(False, None, "not queued")
    me, position = waiting[index], index + 1
    used = sum(in_use.values())

    def fits_quota(w: Waiting) -> bool:
        quota = quotas.get(w.queue)
        return quota is None or in_use.get(w.queue, 0) + w.gpus <= quota

    heads: dict[str, Waiting] = {}
    for w in waiting:
        heads.setdefault(w.queue, w)
    if heads[me.queue] is not me:
        ahead = sum(1 for w in waiting[:index] if w.queue == me.queue)
        return Verdict(
            False,
            position,
            f"waiting behind {ahead} earlier job(s) of queue {me.queue!r} (position {position})",
        )
    if not fits_quota(me):
        return Verdict(
            False,
            position,
            f"waiting for queue {me.queue!r} quota: needs {me.gpus} GPUs, "
            f"{in_use.get(me.queue, 0)}/{quotas[me.queue]} in use (position {position})",
        )
    first = next(w for w in waiting if heads[w.queue] is w and fits_quota(w))
    if first is not me or used + me.gpus > capacity:
        return Verdict(
            False,
            position,
            f"waiting for {me.gpus} GPU slots ({used}/{capacity} in use, position {position})",
        )
    return Verdict(True, position, "starting")
