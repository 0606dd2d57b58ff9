"""Kueue's ClusterQueues as :mod:`aviflow.estimate`'s queue limits, and the pool snapshot the
controller publishes in the run store (``.pool.json``) for dry runs, checked and bounded
field by field when read back (:func:`parse_snapshot`). Pure.

>>> cq = {"metadata": {"name": "vision"}, "spec": {"cohortName": "research",
...       "queueingStrategy": "BestEffortFIFO", "preemption": {"reclaimWithinCohort": "Any"},
...       "resourceGroups": [{"flavors": [{"resources": [{"name": "nvidia.com/gpu",
...       "nominalQuota": 8, "borrowingLimit": "4"}]}]}]}}
>>> queue_limits(cq, "nvidia.com/gpu")
QueueLimits(name='vision', nominal=8, cohort='research', borrowing_limit=4, lending_limit=None, strict=False, fair_weight=None, reclaim=True)

Kueue reports a ClusterQueue's ``status.fairSharing`` only where its Configuration has fair
sharing on; then the queue's weight (``spec.fairSharing.weight``, default 1) orders borrowers:

>>> cq["status"] = {"fairSharing": {"weightedShare": 0}}
>>> queue_limits(cq, "nvidia.com/gpu").fair_weight
1.0
>>> cq["spec"]["fairSharing"] = {"weight": "500m"}
>>> queue_limits(cq, "nvidia.com/gpu").fair_weight
0.5
>>> cq["spec"]["fairSharing"] = {"weight": "2G"}  # at most what a snapshot holds
>>> queue_limits(cq, "nvidia.com/gpu").fair_weight == MAX_GPUS
True
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from aviflow._units import parse_quantity
from aviflow.estimate import UNKNOWN, Holding, QueueLimits, Waiting

log = logging.getLogger("aviflow.forecast")
POOL_FILE = ".pool.json"  # in the run store's root: the controller's latest snapshot
POOL_FRESH = 120.0  # seconds a snapshot is believed for a dry run
# seconds Kueue (0.17) may take to admit a waiting Workload after the release that lets it
# in: it requeues inadmissible Workloads in batches of a second (ten with its
# SchedulerLongRequeueInterval feature gate); aviflow.estimate's ``requeue``
KUEUE_REQUEUE = 1.0


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
        fair_weight=_fair_weight(cq),
        reclaim=reclaims(cq),
    )


def _fair_weight(cq: Mapping[str, Any]) -> float | None:
    """The ClusterQueue's fair-sharing weight where Kueue reports its fair-sharing status
    (fair sharing on), else None."""
    if not (cq.get("status") or {}).get("fairSharing"):
        return None
    weight = ((cq.get("spec") or {}).get("fairSharing") or {}).get("weight")
    try:  # bounded as the pool snapshot reads it back (a larger one would refuse it all)
        return 1.0 if weight is None else min(float(MAX_GPUS), max(0.0, parse_quantity(weight)))
    except (TypeError, ValueError):
        return 1.0  # Kueue validated it; one it cannot be read as counts as the default


def reclaims(cq: Mapping[str, Any]) -> bool:
    """Whether the ClusterQueue takes back what others borrowed of its quota (preemption):
    each queue by its own setting (one in the cluster that does not reclaim, or a queue of
    no cohort, says nothing of the others).

    >>> reclaims({"spec": {"preemption": {"reclaimWithinCohort": "Never"}}}), reclaims({})
    (False, False)
    """
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
    """The snapshot as JSON (``queues``: LocalQueue -> ClusterQueue; infinite ends: null;
    ``reclaim``: whether a queue whose limits do not say reclaims)."""
    return {
        "time": now,
        "reclaim": reclaim,
        "queues": dict(queues),
        "limits": [
            {"name": q.name, "nominal": q.nominal, "cohort": q.cohort,
             "borrowingLimit": q.borrowing_limit, "lendingLimit": q.lending_limit,
             "strict": q.strict, "fairWeight": q.fair_weight, "reclaim": q.reclaim}
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


# What a snapshot may hold: more is not a pool's, and refuses the whole file
MAX_QUEUES = 1000  # ClusterQueues, and LocalQueues mapped to them
MAX_JOBS = 10_000  # jobs holding GPUs, and jobs waiting
MAX_GPUS = 1 << 20  # GPUs of one queue's limit or one job
MAX_NAME = 253  # a queue's name, a cohort's, a job's id
Snapshot = tuple[float, list[QueueLimits], list[Holding], list[Waiting], dict[str, str], bool]


def _name(v: Any, what: str) -> str:
    if not isinstance(v, str) or not 0 < len(v) <= MAX_NAME:
        raise ValueError(f"{what} is not a name of 1 to {MAX_NAME} characters")
    return v


def _int(v: Any, what: str, optional: bool = False) -> Any:
    if v is None and optional:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= MAX_GPUS:
        raise ValueError(f"{what} is not a whole number from 0 to {MAX_GPUS}")
    return v


def _bool(v: Any, what: str) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"{what} is not true or false")
    return v


def _maybe_bool(v: Any, what: str) -> bool | None:
    if v is not None and not isinstance(v, bool):
        raise ValueError(f"{what} is not null, true or false")
    return v


def _seconds(v: Any, what: str, end: bool = False) -> float:
    """Finite seconds, not negative; with ``end`` null is :data:`UNKNOWN` (no known end)."""
    if v is None and end:
        return UNKNOWN
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v < math.inf:
        raise ValueError(f"{what} is not finite seconds, 0 or more")  # NaN fails the range too
    return float(v)


def _list(v: Any, what: str, most: int) -> list[Any]:
    if not isinstance(v, list) or len(v) > most:
        raise ValueError(f"{what} is not a list of at most {most}")
    return v


def _fields(
    v: Any, what: str, keys: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``v`` as an object of ``keys`` (and of any of ``optional``: an earlier version's
    snapshot has none of them), nothing else."""
    if not isinstance(v, dict) or not set(keys) <= set(v) <= {*keys, *optional}:
        raise ValueError(f"{what} is not an object of {', '.join(keys)}")
    return v


def _weight(v: Any, what: str) -> float | None:
    if v is None:
        return None
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 <= v <= MAX_GPUS:
        raise ValueError(f"{what} is not null or a number from 0 to {MAX_GPUS}")
    return float(v)


def _window(v: Any, what: str) -> tuple[float, float]:
    if not isinstance(v, list) or len(v) != 2:
        raise ValueError(f"{what} is not a pair")
    return _seconds(v[0], f"{what}[0]", end=True), _seconds(v[1], f"{what}[1]", end=True)


def parse_snapshot(data: Any) -> Snapshot:
    """The snapshot :func:`snapshot_dict` wrote, every field checked and bounded; a
    ValueError says the first that is not."""
    top = _fields(data, "the snapshot", ("time", "reclaim", "queues", "limits", "holding",
                                         "waiting"))  # fmt: skip
    if not isinstance(top["queues"], dict) or len(top["queues"]) > MAX_QUEUES:
        raise ValueError(f"queues is not an object of at most {MAX_QUEUES}")
    queues = {_name(k, "a queue"): _name(v, f"queues.{k}") for k, v in top["queues"].items()}
    limits = []
    for i, q in enumerate(_list(top["limits"], "limits", MAX_QUEUES)):
        at = f"limits[{i}]"
        q = _fields(q, at, ("name", "nominal", "cohort", "borrowingLimit", "lendingLimit",
                            "strict"), optional=("fairWeight", "reclaim"))  # fmt: skip
        cohort = None if q["cohort"] is None else _name(q["cohort"], f"{at}.cohort")
        limits.append(QueueLimits(
            _name(q["name"], f"{at}.name"), _int(q["nominal"], f"{at}.nominal"), cohort,
            _int(q["borrowingLimit"], f"{at}.borrowingLimit", optional=True),
            _int(q["lendingLimit"], f"{at}.lendingLimit", optional=True),
            _bool(q["strict"], f"{at}.strict"),
            _weight(q.get("fairWeight"), f"{at}.fairWeight"),
            _maybe_bool(q.get("reclaim"), f"{at}.reclaim"),
        ))  # fmt: skip
    jobs: dict[str, list[Any]] = {}
    for part, window in (("holding", "release"), ("waiting", "runsFor")):
        found = jobs[part] = []
        for i, j in enumerate(_list(top[part], part, MAX_JOBS)):
            at = f"{part}[{i}]"
            j = _fields(j, at, ("id", "queue", "gpus", window))
            job_id, queue = _name(j["id"], f"{at}.id"), _name(j["queue"], f"{at}.queue")
            gpus, ends = _int(j["gpus"], f"{at}.gpus"), _window(j[window], f"{at}.{window}")
            found.append((job_id, queue, gpus, ends))
    return (
        _seconds(top["time"], "time"),
        limits,
        [Holding(*h) for h in jobs["holding"]],
        [Waiting(*w) for w in jobs["waiting"]],
        queues,
        _bool(top["reclaim"], "reclaim"),
    )


def read_snapshot(data: Any) -> Snapshot | None:
    """:func:`parse_snapshot`, or None: no snapshot (``data`` None: no file, or not JSON), or
    one refused as a whole (logged). Only the controller writes it, but a reader checks what
    it reads."""
    if data is None:
        return None
    try:
        return parse_snapshot(data)
    except ValueError as exc:
        log.warning("%s refused (%s): dry runs have no forecast until the next one", POOL_FILE, exc)
        return None
