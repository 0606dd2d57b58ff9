"""Live metric charts: each logged metric against step (loss first), as inline SVG.

Rendered in pure Python into an ``HTML`` widget, so it works in JupyterLab 4 and
Notebook 7 without a frontend build. Each series is downsampled to at most
``max_points`` (min and max of each bucket, so spikes survive), so the message size is
bounded however many points a job logs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import ipywidgets as w

from aviflow_magics._snapshot import JobSnapshot
from aviflow_magics.widgets._html import esc

MAX_POINTS = 300
MAX_CHARTS = 8
WIDTH, HEIGHT = 320, 170
_PAD_L, _PAD_R, _PAD_T, _PAD_B = 52, 10, 22, 26


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
        return f"{v:.4g}"
    return f"{v:.2e}"


def render_svg(
    name: str, points: Sequence[tuple[int, float]], width: int = WIDTH, height: int = HEIGHT
) -> str:
    """One chart: a polyline of ``points`` (already downsampled) with min/max labels."""
    finite = [(s, v) for s, v in points if math.isfinite(v)]
    title = f"{esc(name)}" + (f" = {_fmt(finite[-1][1])} @ step {finite[-1][0]}" if finite else "")
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' class='aviflow-chart' data-metric='{esc(name)}' "
        f"data-points='{len(finite)}' width='{width}' height='{height}' viewBox='0 0 {width} {height}' "
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
            f"<polyline fill='none' stroke='#2563eb' stroke-width='1.5' points='{coords}'/>"
        )
        label = "font-size='10' font-family='sans-serif' fill='#4b5563'"
        parts += [
            f"<text x='{x0 - 4}' y='{y0 + 8}' text-anchor='end' {label}>{_fmt(vmax)}</text>",
            f"<text x='{x0 - 4}' y='{y1}' text-anchor='end' {label}>{_fmt(vmin)}</text>",
            f"<text x='{x0}' y='{y1 + 14}' {label}>{smin}</text>",
            f"<text x='{x1}' y='{y1 + 14}' text-anchor='end' {label}>step {smax}</text>",
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
) -> str:
    if not metrics:
        return "<div class='aviflow-charts' style='color:#6b7280;font-size:12px'>no metrics logged yet</div>"
    names = list(metrics)
    svgs = [render_svg(n, downsample(metrics[n], max_points)) for n in names[:max_charts]]
    more = names[max_charts:]
    extra = f"<div style='font-size:11px'>also logged: {esc(', '.join(more))}</div>" if more else ""
    return (
        "<div class='aviflow-charts' style='display:flex;flex-wrap:wrap'>"
        + "".join(svgs)
        + "</div>"
        + extra
    )


class MetricChart(w.HTML):
    """Every numeric metric against step; re-rendered only when a series changed."""

    def __init__(self, max_points: int = MAX_POINTS, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.max_points = max_points
        self._seen: tuple = ()
        self.value = charts_html({})

    def update_from(self, snap: JobSnapshot) -> None:
        key = tuple((n, len(p), p[-1] if p else None) for n, p in snap.metrics.items())
        if key != self._seen:
            self._seen = key
            self.value = charts_html(snap.metrics, self.max_points)
