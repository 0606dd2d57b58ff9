"""The HTML usage report: tables and inline-SVG bar charts, no scripts, everything escaped
(team and user names are the hub's; numbers go through :func:`aviflow.views.html.num` too)."""

from __future__ import annotations

from typing import Any

from aviflow.views.html import esc, num

MAX_LABEL = 28  # characters of a chart's label

_TITLES = {
    "team": "GPU-hours by team",
    "user": "GPU-hours by user",
    "day": "GPU-hours by day (UTC)",
    "week": "GPU-hours by ISO week",
}
# The look of aviflow-api's pages: the report's, which the job pages extend.
REPORT_CSS = (
    "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}"
    "td:first-child,th:first-child{text-align:left}"
)


def bar_chart(rows: list[dict[str, Any]], width: int = 560, bar: int = 18) -> str:
    """A horizontal SVG bar chart of ``gpu_hours`` per ``key``."""
    top = max((r["gpu_hours"] for r in rows), default=0.0) or 1.0
    label_w, gap = 170, 6
    height = max(len(rows), 1) * (bar + gap) + gap
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'role="img" class="chart">'
    ]
    for i, r in enumerate(rows):
        y = gap + i * (bar + gap)
        w = round((width - label_w - 80) * r["gpu_hours"] / top, 1)
        parts.append(
            f'<text x="0" y="{y + bar - 4}" font-size="12">{esc(str(r["key"])[:MAX_LABEL])}</text>'
            f'<rect x="{label_w}" y="{y}" width="{num(w)}" height="{bar}" fill="#4c78a8"/>'
            f'<text x="{num(label_w + w + 4)}" y="{y + bar - 4}" font-size="12">'
            f"{num(r['gpu_hours'], '.2f')}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _table(rows: list[dict[str, Any]], by: str) -> str:
    head = "".join(
        f"<th>{esc(h)}</th>"
        for h in (
            by,
            "GPU-hours",
            "used GPU-hours",
            "used hours (CPU pools)",
            "attempts",
            "jobs",
            "restarts",
            "preemptions",
            "idle jobs",
        )
    )
    body = "".join(
        f"<tr><td>{esc(r['key'])}</td><td>{num(r['gpu_hours'], '.3f')}</td>"
        f"<td>{num(r.get('used_gpu_hours', 0.0), '.3f')}</td>"
        f"<td>{num(r.get('used_cpu_hours', 0.0), '.3f')}</td>"
        f"<td>{num(r['attempts'])}</td><td>{num(r['jobs'])}</td><td>{num(r['restarts'])}</td>"
        f"<td>{num(r['preemptions'])}</td><td>{num(r.get('idle_jobs', 0))}</td></tr>"
        for r in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def render_report(
    sections: dict[str, list[dict[str, Any]]],
    *,
    viewer: str,
    scope: str,
    generated: str,
    csv_base: str,
) -> str:
    """The whole page: one chart + table + CSV link per grouping in ``sections``."""
    blocks = []
    for by, rows in sections.items():
        blocks.append(
            f'<section id="by-{esc(by)}"><h2>{esc(_TITLES.get(by, by))}</h2>'
            f"{bar_chart(rows)}{_table(rows, by)}"
            f'<p><a href="{esc(csv_base)}?by={esc(by)}&amp;format=csv">CSV</a></p></section>'
        )
    return (
        '<!doctype html><html><head><meta charset="utf-8"><title>Aviflow usage</title>'
        f"<style>{REPORT_CSS}</style></head><body>"
        f"<h1>Aviflow GPU usage</h1><p>Viewer: {esc(viewer)} &middot; scope: {esc(scope)}"
        f" &middot; generated {esc(generated)}</p>{''.join(blocks)}</body></html>"
    )
