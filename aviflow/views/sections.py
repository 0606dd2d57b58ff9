"""The panel's sections as HTML, rendered from a :class:`~aviflow.views.snapshot.JobSnapshot`.

Pure functions, shared by every place that shows a job: the notebook panel's widgets
(``aviflow_magics.widgets``), the JupyterLab job view (through the server extension
``aviflow_jupyter``) and aviflow-api's job page. Everything interpolated is escaped
(:func:`~aviflow.views.html.esc`, numbers through :func:`~aviflow.views.html.num`), whatever
its declared type: names, messages, tracebacks, metric keys and checkpoint fields come from
the job. Charts are inline SVG (no scripts) of the points whose step and value are finite
numbers, each series downsampled to at most ``MAX_POINTS`` points (the min and max of each
bucket, so spikes survive) so a page's size is bounded however many points a job logs.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any

from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import FailureInfo, JobState
from aviflow.views.html import badge, duration, esc, num
from aviflow.views.snapshot import JobSnapshot
from aviflow.views.use import rank_use, use_html, used_hours_html
from aviflow.views.waiting import start_words, wait_words

MAX_POINTS = 300
MAX_CHARTS = 8
WIDTH, HEIGHT = 320, 170
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 52, 10, 22, 26
MAX_RANKS_SHOWN = 64
MAX_LOG_CHARS = 64_000


def header_html(snap: JobSnapshot) -> str:
    parts = [
        f"<b class='aviflow-name'>{esc(snap.name)}</b>",
        f"<code class='aviflow-id'>{esc(snap.id)}</code>",
        badge(snap.state.value),
        f"<span class='aviflow-elapsed'>elapsed {esc(duration(snap.elapsed))}</span>",
        f"<span class='aviflow-gpu-hours'>{num(snap.gpu_hours, '.4f')} GPU-h</span>"
        + used_hours_html(snap.used_hours, snap.used_kind),
        f"<span>{num(snap.nodes)}&times;{num(snap.gpus_per_node)} GPUs</span>",
    ]
    if not isinstance(snap.attempt, int) or snap.attempt > 1:
        parts.append(f"<span>attempt {num(snap.attempt)}</span>")
    line = " &nbsp;·&nbsp; ".join(parts)
    detail = ""
    if snap.state is JobState.QUEUED:
        pos = f"position {snap.queue_position} in the queue" if snap.queue_position else "queued"
        detail = f"<div class='aviflow-queue'>{esc(pos)}: {esc(snap.message)}</div>"
        detail += waiting_html(snap.expected_start, snap.wait, snap.now)
    elif snap.message and snap.state is not JobState.RUNNING:
        detail = f"<div class='aviflow-message'>{esc(snap.message)}</div>"
    use = use_html(snap.metrics, snap.usage, snap.idle)
    return f"<div class='aviflow-header'>{line}{detail}{use}</div>"


def waiting_html(est: Estimate | None, wait: WaitNumbers | None, now: float) -> str:
    """A queued job's expected start and wait numbers, a line each (words of
    :mod:`aviflow.views.waiting`; nothing where the status has neither)."""
    out = ""
    if est is not None and (words := start_words(est, now)):
        out += f"<div class='aviflow-start'>{esc(words)}</div>"
    if wait is not None:
        out += f"<div class='aviflow-wait'>{esc(wait_words(wait))}</div>"
    return out


def ranks_html(snap: JobSnapshot) -> str:
    if len(snap.ranks) > MAX_RANKS_SHOWN:
        counts: dict[str, int] = {}
        for r in snap.ranks:
            counts[r.state] = counts.get(r.state, 0) + 1
        shown = " ".join(
            f"{badge(s, 'aviflow-rank-state')} &times;{num(n)}" for s, n in counts.items()
        )
        return (
            "<div class='aviflow-ranks' style='font-size:12px'>"
            f"{num(len(snap.ranks))} ranks: {shown}</div>"
        )
    rows = []
    use = rank_use(snap.usage) if snap.state is JobState.RUNNING else {}
    for node in range(snap.nodes):
        cells = " ".join(
            f"<span class='aviflow-rank' data-rank='{num(r.rank)}'>rank {num(r.rank)} "
            f"{badge(r.state, 'aviflow-rank-state')}{_rank_use(use, r.rank)}</span>"
            for r in snap.ranks
            if r.node == node
        )
        rows.append(
            f"<div class='aviflow-node' data-node='{num(node)}'><b>node {num(node)}</b>: {cells}</div>"
        )
    return "<div class='aviflow-ranks' style='font-size:12px'>" + "".join(rows) + "</div>"


def _rank_use(use: dict[int, str], rank: object) -> str:
    found = use.get(rank) if isinstance(rank, int) else None
    return f" <span class='aviflow-rank-use'>{esc(found)}</span>" if found else ""


def failure_html(failure: FailureInfo) -> str:
    where, what, trace = failure.where(), failure.what(), failure.detail()
    return (
        "<div class='aviflow-failure' style='border-left:4px solid #b91c1c;background:#fef2f2;"
        "padding:4px 8px'>"
        f"<b>First failure: {esc(where)}</b> &mdash; {esc(what)}"
        f"<pre style='max-height:240px;overflow:auto;font-size:11px;margin:4px 0'>{esc(trace)}</pre>"
        "</div>"
    )


def downsample(
    points: Sequence[tuple[int, float]], max_points: int = MAX_POINTS
) -> list[tuple[int, float]]:
    """At most ``max_points`` points: the first, the last, and each bucket's min and max."""
    n = len(points)
    if n <= max_points:
        return list(points)
    buckets = max(1, (max_points - 2) // 2)
    inner = points[1:-1]
    size = len(inner) / buckets
    out = [points[0]]
    for b in range(buckets):
        chunk = inner[int(b * size) : int((b + 1) * size)]
        if not chunk:
            continue
        lo = min(chunk, key=lambda p: p[1])
        hi = max(chunk, key=lambda p: p[1])
        out.extend(sorted({lo, hi}))
    out.append(points[-1])
    return out


def _fmt(v: float) -> str:
    if v == 0 or 1e-3 <= abs(v) < 1e5:
        return num(v, ".4g")
    return num(v, ".2e")


def _finite(x: object) -> bool:
    """A real number (not a bool, a string or None) that is neither NaN nor infinite."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def render_svg(
    name: str, points: Sequence[tuple[int, float]], width: int = WIDTH, height: int = HEIGHT
) -> str:
    """One chart: a polyline of ``points`` (already downsampled) with min/max labels; a point
    whose step or value is not a finite number is left out."""
    finite = [(s, v) for s, v in points if _finite(s) and _finite(v)]
    title = esc(name) + (f" = {_fmt(finite[-1][1])} @ step {num(finite[-1][0])}" if finite else "")
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='aviflow-chart' data-metric='{esc(name)}' "
        f"data-points='{num(len(finite))}' width='{num(width)}' height='{num(height)}' "
        f"viewBox='0 0 {num(width)} {num(height)}' "
        "style='background:white;border:1px solid #e5e7eb;margin:2px'>",
        f"<text x='{_PAD_L}' y='14' font-size='12' font-family='sans-serif' fill='#111'>{title}</text>",
    ]
    x0, x1, y0, y1 = _PAD_L, width - _PAD_R, _PAD_T, height - _PAD_B
    parts.append(
        f"<rect x='{x0}' y='{y0}' width='{x1 - x0}' height='{y1 - y0}' fill='none' stroke='#d1d5db'/>"
    )
    if finite:
        smin, smax = finite[0][0], finite[-1][0]
        vmin = min(v for _, v in finite)
        vmax = max(v for _, v in finite)
        if vmax == vmin:
            vmin, vmax = vmin - 0.5, vmax + 0.5
        kx = (x1 - x0) / max(1, smax - smin)
        ky = (y1 - y0) / (vmax - vmin)
        coords = " ".join(
            [f"{x0 + (s - smin) * kx:.1f},{y1 - (v - vmin) * ky:.1f}" for s, v in finite]
        )
        parts.append(
            f"<polyline fill='none' stroke='#2563eb' stroke-width='1.5' points='{esc(coords)}'/>"
        )
        label = "font-size='10' font-family='sans-serif' fill='#4b5563'"
        parts += [
            f"<text x='{x0 - 4}' y='{y0 + 8}' text-anchor='end' {label}>{_fmt(vmax)}</text>",
            f"<text x='{x0 - 4}' y='{y1}' text-anchor='end' {label}>{_fmt(vmin)}</text>",
            f"<text x='{x0}' y='{y1 + 14}' {label}>{num(smin)}</text>",
            f"<text x='{x1}' y='{y1 + 14}' text-anchor='end' {label}>step {num(smax)}</text>",
        ]
    else:
        parts.append(
            f"<text x='{(x0 + x1) // 2}' y='{(y0 + y1) // 2}' text-anchor='middle' "
            "font-size='11' font-family='sans-serif' fill='#9ca3af'>no points yet</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def charts_html(
    metrics: dict[str, list[tuple[int, float]]],
    max_points: int = MAX_POINTS,
    max_charts: int = MAX_CHARTS,
    read_so_far: int | None = None,
) -> str:
    """The charts; ``read_so_far``: the rows read while more are still to be read (a note
    says the charts are not complete yet)."""
    reading = (
        f"<div class='aviflow-reading' style='font-size:11px;color:#6b7280'>reading the "
        f"logged metrics: {num(read_so_far)} rows so far, more to come</div>"
        if read_so_far is not None
        else ""
    )
    if not metrics:
        return reading or (
            "<div class='aviflow-charts' style='color:#6b7280;font-size:12px'>no metrics logged yet</div>"
        )
    names = list(metrics)
    svgs = [render_svg(n, downsample(metrics[n], max_points)) for n in names[:max_charts]]
    more = names[max_charts:]
    extra = f"<div style='font-size:11px'>also logged: {esc(', '.join(more))}</div>" if more else ""
    return (
        reading
        + "<div class='aviflow-charts' style='display:flex;flex-wrap:wrap'>"
        + "".join(svgs)
        + "</div>"
        + extra
    )


def _clock(t: object) -> str:
    """``HH:MM:SS`` of an epoch time; anything else as escaped text; nothing for none (or 0)."""
    if not t:
        return ""
    if _finite(t):
        try:
            return esc(time.strftime("%H:%M:%S", time.localtime(t)))  # type: ignore[arg-type]
        except (OverflowError, OSError, ValueError):
            pass
    return esc(t)


def checkpoints_html(snap: JobSnapshot) -> str:
    """The checkpoints, one row each: step, attempt and time as the job's marker has them
    (each escaped: a marker is written by the job)."""
    if not snap.checkpoints:
        return "<div class='aviflow-checkpoints' style='color:#6b7280;font-size:12px'>no checkpoints yet</div>"
    rows = "".join(
        f"<tr class='aviflow-checkpoint' data-step='{num(c.step)}'><td>{num(c.step)}</td>"
        f"<td>{num(c.attempt) if c.attempt is not None else ''}</td>"
        f"<td>{_clock(c.time)}</td></tr>"
        for c in snap.checkpoints
    )
    return (
        "<table class='aviflow-checkpoints' style='font-size:12px'><tr><th>step</th><th>attempt</th>"
        f"<th>saved</th></tr>{rows}</table>"
    )


def log_html(text: str) -> str:
    if len(text) > MAX_LOG_CHARS:
        text = "…" + text[-MAX_LOG_CHARS:]
    body = esc(text) if text else "<span style='color:#9ca3af'>(no output yet)</span>"
    return (
        "<pre class='aviflow-log' style='max-height:220px;overflow:auto;font-size:11px;"
        f"background:#f9fafb;margin:0;padding:4px'>{body}</pre>"
    )


SECTIONS = ("header", "failure", "charts", "ranks", "checkpoints")


def reading_so_far(snap: JobSnapshot) -> int | None:
    """The metric rows read so far while the snapshot is catching up, else None."""
    return snap.metric_rows if snap.catching_up else None


def sections_html(snap: JobSnapshot) -> dict[str, str]:
    """Every section of the panel, by name (``failure`` is empty without a failure)."""
    return {
        "header": header_html(snap),
        "failure": failure_html(snap.failure) if snap.failure else "",
        "charts": charts_html(snap.metrics, read_so_far=reading_so_far(snap)),
        "ranks": ranks_html(snap),
        "checkpoints": checkpoints_html(snap),
    }


def snapshot_dict(snap: JobSnapshot) -> dict[str, Any]:
    """The snapshot as JSON (camelCase keys, as the HTTP APIs write records)."""
    return {
        "id": snap.id,
        "name": snap.name,
        "state": snap.state.value,
        "attempt": snap.attempt,
        "message": snap.message,
        "queuePosition": snap.queue_position,
        "nodes": snap.nodes,
        "gpusPerNode": snap.gpus_per_node,
        "submitted": snap.submitted,
        "finished": snap.finished,
        "now": snap.now,
        "elapsed": snap.elapsed,
        "gpuHours": snap.gpu_hours,
        "usedHours": snap.used_hours,
        "usedKind": snap.used_kind,
        "failure": snap.failure.to_dict() if snap.failure else None,
        "ranks": [{"rank": r.rank, "node": r.node, "state": r.state} for r in snap.ranks],
        "logRanks": list(snap.log_ranks),
        "checkpoints": [c.to_dict() for c in snap.checkpoints],
        "metricRows": snap.metric_rows,
        "catchingUp": snap.catching_up,
        "usage": snap.usage,
        "idle": snap.idle,
        "expectedStart": snap.expected_start.to_dict() if snap.expected_start else None,
        "wait": snap.wait.to_dict() if snap.wait else None,
        "metrics": {k: [list(p) for p in v] for k, v in snap.metrics.items()},
    }
