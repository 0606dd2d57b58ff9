"""Kueue's ClusterQueues as :mod:`aviflow.estimate`'s queue limits, and the pool snapshot the
controller publishes in the run store (``.pool.json``) for dry runs. Pure.

>>> cq = {"metadata": {"name": "vision"}, "spec": {"cohortName": "research",
...       "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Any"},
...       "resourceGroups": [{"flavors": [{"resources": [{"name": "nvidia.com/gpu",
...       "nominalQuota": 8, "borrowingLimit": "4"}]}]}]}}
>>> queue_limits(cq, "nvidia.com/gpu")
QueueLimits(name='vision', nominal=8, cohort='research', borrowing_limit=4, lending_limit=None, strict=False)
>>> reclaims(cq)
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from aviflow._units import parse_quantity
from aviflow.estimate import UNKNOWN, Holding, QueueLimits, Waiting

POOL_FILE = ".pool.json"  # in the run store's root: the controller's latest snapshot
POOL_FRESH = 120.0  # seconds a snapshot is believed for a dry run


def _gpu_resource(cq: Mapping[str, Any], gpu_resource: str) -> list[Mapping[str, Any]]:
    found = []
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == gpu_resource:
                    found.append(res)
    return found


def queue_limits(cq: Mapping[str, Any], gpu_resource: str) -> QueueLimits:
    """A ClusterQueue's GPU limits (its flavors' quotas added up)."""
    spec = cq.get("spec") or {}
    nominal, borrow, lend = 0, None, None
    for res in _gpu_resource(cq, gpu_resource):
        nominal += int(parse_quantity(res.get("nominalQuota", 0)))
        if res.get("borrowingLimit") is not None:
            borrow = (borrow or 0) + int(parse_quantity(res["borrowingLimit"]))
        if res.get("lendingLimit") is not None:
            lend = (lend or 0) + int(parse_quantity(res["lendingLimit"]))
    cohort = spec.get("cohortName") or spec.get("cohort")
    return QueueLimits(
        name=str(cq["metadata"]["name"]),
        nominal=nominal,
        cohort=str(cohort) if cohort else None,
        borrowing_limit=borrow,
        lending_limit=lend,
        strict=spec.get("queueingStrategy") == "StrictFIFO",
    )


def reclaims(cq: Mapping[str, Any]) -> bool:
    """Whether the ClusterQueue takes back what others borrowed of its quota (preemption)."""
    preemption = (cq.get("spec") or {}).get("preemption") or {}
    return (preemption.get("reclaimWithinCohort") or "Never") != "Never"


def cq_usage(cq: Mapping[str, Any], gpu_resource: str) -> int:
    """GPUs the ClusterQueue's admitted workloads hold (its status)."""
    used = 0
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == gpu_resource:
                used += int(parse_quantity(res.get("total", 0)))
    return used


def _t(v: float) -> float | None:
    return None if math.isinf(v) else round(v, 3)


def snapshot_dict(
    now: float,
    limits: Sequence[QueueLimits],
    holding: Sequence[Holding],
    waiting: Sequence[Waiting],
    queues: Mapping[str, str],
    reclaim: bool,
) -> dict[str, Any]:
    """The snapshot as JSON (``queues``: LocalQueue -> ClusterQueue; infinite ends: null)."""
    return {
        "time": now,
        "reclaim": reclaim,
        "queues": dict(queues),
        "limits": [
            {"name": q.name, "nominal": q.nominal, "cohort": q.cohort,
             "borrowingLimit": q.borrowing_limit, "lendingLimit": q.lending_limit,
             "strict": q.strict}
            for q in limits
        ],
        "holding": [
            {"id": h.id, "queue": h.queue, "gpus": h.gpus,
             "release": [_t(h.release[0]), _t(h.release[1])]}
            for h in holding
        ],
        "waiting": [
            {"id": w.id, "queue": w.queue, "gpus": w.gpus,
             "runsFor": [_t(w.runs_for[0]), _t(w.runs_for[1])]}
            for w in waiting
        ],
    }  # fmt: skip


def _end(v: Any) -> float:
    return UNKNOWN if v is None else float(v)


def read_snapshot(
    data: Any,
) -> tuple[float, list[QueueLimits], list[Holding], list[Waiting], dict[str, str], bool] | None:
    """The snapshot :func:`snapshot_dict` wrote (None: not one; the controller writes it, but a
    reader checks what it reads)."""
    try:
        limits = [
            QueueLimits(str(q["name"]), int(q["nominal"]), q.get("cohort"),
                        q.get("borrowingLimit"), q.get("lendingLimit"), bool(q.get("strict")))
            for q in data["limits"]
        ]  # fmt: skip
        holding = [
            Holding(str(h["id"]), str(h["queue"]), int(h["gpus"]),
                    (_end(h["release"][0]), _end(h["release"][1])))
            for h in data["holding"]
        ]  # fmt: skip
        waiting = [
            Waiting(str(w["id"]), str(w["queue"]), int(w["gpus"]),
                    (_end(w["runsFor"][0]), _end(w["runsFor"][1])))
            for w in data["waiting"]
        ]  # fmt: skip
        queues = {str(k): str(v) for k, v in data["queues"].items()}
        return float(data["time"]), limits, holding, waiting, queues, bool(data["reclaim"])
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None
