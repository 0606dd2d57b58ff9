"""A job's throughput and use as one line of HTML (part of the panel's header): tokens/s,
step time and MFU from its metrics (:mod:`aviflow.throughput`), GPU or CPU utilization,
memory and power from the driver's latest ``USAGE`` event, and the idle flag
(:mod:`aviflow.usage`). Every figure is type-checked and escaped: metrics are the job's, and
a view trusts no event's shape either.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from aviflow.views.html import esc

GIB = float(1 << 30)


def _real(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def _last(metrics: Mapping[str, list[tuple[int, float]]], key: str) -> float | None:
    points = metrics.get(key) or []
    return _real(points[-1][1]) if points else None


def throughput_parts(metrics: Mapping[str, list[tuple[int, float]]]) -> list[str]:
    out = []
    rate, step, mfu = (_last(metrics, k) for k in ("tokens_per_s", "step_time", "mfu"))
    if rate is not None:
        out.append(f"{rate:,.0f} tokens/s")
    if step is not None:
        out.append(f"{step:.3g} s/step")
    if mfu is not None:
        out.append(f"MFU {100 * mfu:.1f}%")
    return out


def use_parts(data: Mapping[str, Any] | None) -> list[str]:
    if not isinstance(data, Mapping):
        return []
    util = _real(data.get("util"))
    if util is None or not 0 <= util <= 100:
        return []
    what = "GPU" if data.get("kind") == "gpu" else "CPU"
    out = [f"{what} {util:.0f}%"]
    mem, total = _real(data.get("mem")), _real(data.get("memTotal"))
    label = "GPU mem" if what == "GPU" else "RSS"
    if mem is not None and total:
        out.append(f"{label} {mem / GIB:.1f}/{total / GIB:.0f} GiB")
    elif mem is not None:
        out.append(f"{label} {mem / GIB:.1f} GiB")
    power = _real(data.get("power"))
    if power is not None:
        out.append(f"{power:.0f} W")
    return out


def rank_use(data: Mapping[str, Any] | None) -> dict[int, str]:
    """Each rank's utilization in the latest ``USAGE`` event, as the ranks section shows it
    (``"87%"``), for ranks whose figure is a percentage."""
    rows = data.get("perRank") if isinstance(data, Mapping) else None
    out: dict[int, str] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, Mapping):
            continue
        rank, util = row.get("rank"), _real(row.get("util"))
        if (
            isinstance(rank, int)
            and not isinstance(rank, bool)
            and util is not None
            and 0 <= util <= 100
        ):
            out[rank] = f"{util:.0f}%"
    return out


def used_hours_html(hours: object, kind: object) -> str:
    """`` (used N, GPU)`` after the allocated GPU-hours: allocated x mean utilization, from
    GPU or, on a pool without GPUs, CPU use (labelled so); ``""`` when unmeasured."""
    value = _real(hours)
    if value is None or value < 0:
        return ""
    what = "GPU" if kind == "gpu" else "CPU"
    return f" <span class='aviflow-used-hours'>(used {value:.4f}, by {what} use)</span>"


def use_html(
    metrics: Mapping[str, list[tuple[int, float]]],
    usage: Mapping[str, Any] | None,
    idle: str | None,
) -> str:
    """The line, or ``""`` when there is nothing to show yet."""
    parts = [esc(p) for p in throughput_parts(metrics) + use_parts(usage)]
    if idle:
        parts.append(f"<span class='aviflow-idle' style='color:#b45309'>{esc(idle)}</span>")
    if not parts:
        return ""
    return f"<div class='aviflow-use'>{' &nbsp;·&nbsp; '.join(parts)}</div>"
