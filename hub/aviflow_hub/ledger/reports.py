"""Usage reports from attempt records: pure functions, golden-tested.

``usage_report(attempts, by, now)`` sums allocated GPU time per team, user, UTC day or ISO
week. By day and week an attempt's time is split at UTC midnight (and Monday) boundaries,
so each bucket holds exactly the seconds allocated inside it.

Beside the allocated hours, the *used* hours: each measured attempt's allocated time x its
mean utilization (:meth:`aviflow.attempts.AttemptRecord.used_seconds`), in
``used_gpu_hours`` where GPUs were measured and in ``used_cpu_hours`` where a pool without
GPUs measured its ranks' CPU use (a CPU's utilization is not a GPU's: the two never mix).
Attempts without a measurement add to neither. ``idle_jobs`` counts jobs flagged idle.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from aviflow.attempts import PREEMPTED, AttemptRecord

GroupBy = Literal["team", "user", "day", "week"]
GROUPINGS: tuple[GroupBy, ...] = ("team", "user", "day", "week")
COLUMNS = (
    "key",
    "gpu_hours",
    "gpu_seconds",
    "attempts",
    "jobs",
    "restarts",
    "preemptions",
    "used_gpu_hours",
    "used_cpu_hours",
    "idle_jobs",
)


def _bucket_start(t: float, by: GroupBy) -> datetime:
    d = datetime.fromtimestamp(t, UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return d - timedelta(days=d.weekday()) if by == "week" else d


def _bucket_key(start: datetime, by: GroupBy) -> str:
    if by == "day":
        return start.strftime("%Y-%m-%d")
    year, week, _ = start.isocalendar()
    return f"{year}-W{week:02d}"


def _split(begin: float, end: float, by: GroupBy) -> list[tuple[str, float]]:
    """(bucket key, seconds) pieces of [begin, end)."""
    pieces = []
    step = timedelta(days=7 if by == "week" else 1)
    t = begin
    while t < end:
        start = _bucket_start(t, by)
        edge = min((start + step).timestamp(), end)
        pieces.append((_bucket_key(start, by), edge - t))
        t = edge
    return pieces


def usage_report(
    attempts: Iterable[AttemptRecord], by: GroupBy, now: float
) -> list[dict[str, Any]]:
    """Rows ``{key, gpu_hours, gpu_seconds, attempts, jobs, restarts, preemptions,
    used_gpu_hours, used_cpu_hours, idle_jobs}``, by key."""
    if by not in GROUPINGS:
        raise ValueError(f"group by one of {', '.join(GROUPINGS)}, not {by!r}")
    acc: dict[str, dict[str, Any]] = {}

    def bucket(key: str) -> dict[str, Any]:
        return acc.setdefault(
            key,
            {
                "gpu_seconds": 0.0,
                "attempts": 0,
                "jobs": set(),
                "restarts": 0,
                "preemptions": 0,
                "gpu": 0.0,  # used seconds, by what was measured
                "cpu": 0.0,
                "idle": set(),
            },
        )

    for a in attempts:
        end = a.finished if a.finished is not None else now
        if by in ("team", "user"):
            key = (a.team or "(none)") if by == "team" else a.user
            pieces = [(key, end - a.admitted)]
        else:
            pieces = _split(a.admitted, end, by) or [
                (_bucket_key(_bucket_start(a.admitted, by), by), 0.0)
            ]
        util = a.mean_util()
        for i, (key, seconds) in enumerate(pieces):
            b = bucket(key)
            b["gpu_seconds"] += a.gpus * seconds
            b["jobs"].add(a.job_id)
            if util is not None and a.use_kind in ("gpu", "cpu"):
                b[a.use_kind] += a.gpus * seconds * util / 100.0
            if a.idle:
                b["idle"].add(a.job_id)
            if i == 0:  # counted where the attempt was admitted
                b["attempts"] += 1
                b["restarts"] += 1 if a.attempt > 1 else 0
                b["preemptions"] += 1 if a.preempted or a.outcome == PREEMPTED else 0
    return [
        {
            "key": key,
            "gpu_hours": round(b["gpu_seconds"] / 3600, 6),
            "gpu_seconds": round(b["gpu_seconds"], 3),
            "attempts": b["attempts"],
            "jobs": len(b["jobs"]),
            "restarts": b["restarts"],
            "preemptions": b["preemptions"],
            "used_gpu_hours": round(b["gpu"] / 3600, 6),
            "used_cpu_hours": round(b["cpu"] / 3600, 6),
            "idle_jobs": len(b["idle"]),
        }
        for key, b in sorted(acc.items())
    ]


def total_gpu_seconds(attempts: Iterable[AttemptRecord], now: float) -> float:
    return sum(a.gpu_seconds(now) for a in attempts)


def to_csv(rows: list[dict[str, Any]], by: GroupBy) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([by, *COLUMNS[1:]])
    for r in rows:
        writer.writerow([r[c] for c in COLUMNS])
    return out.getvalue()


def attempts_csv(attempts: Iterable[AttemptRecord], now: float) -> str:
    """Every attempt row, with its allocated GPU-hours (the raw ledger export)."""
    cols = [
        "job_id",
        "attempt",
        "user",
        "team",
        "queue",
        "nodes",
        "gpus",
        "submitted",
        "admitted",
        "started",
        "finished",
        "outcome",
        "restarts",
        "preempted",
        "queue_wait",
        "use_kind",
        "idle",
    ]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([*cols, "gpu_hours", "mean_util", "used_hours"])
    for a in attempts:
        d = a.to_dict()
        util, used = a.mean_util(), a.used_seconds(now)
        writer.writerow(
            [("" if d[c] is None else d[c]) for c in cols]
            + [round(a.gpu_seconds(now) / 3600, 6)]
            + ["" if util is None else round(util, 3)]
            + ["" if used is None else round(used / 3600, 6)]
        )
    return out.getvalue()
