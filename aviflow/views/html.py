"""Small HTML helpers shared by every job view (escaping, badges, durations)."""

from __future__ import annotations

import html

STATE_COLORS = {
    "QUEUED": "#6b7280",
    "STARTING": "#2563eb",
    "RUNNING": "#2563eb",
    "SUCCEEDED": "#15803d",
    "FAILED": "#b91c1c",
    "CANCELLED": "#a16207",
    "STOPPED": "#9ca3af",
}


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def badge(state: str, css_class: str = "aviflow-badge") -> str:
    color = STATE_COLORS.get(state, "#6b7280")
    return (
        f"<span class='{css_class}' data-state='{esc(state)}' style='background:{color};"
        f"color:white;border-radius:4px;padding:1px 6px;font-size:12px;font-weight:600'>"
        f"{esc(state)}</span>"
    )


def duration(seconds: float) -> str:
    """``42s``, ``3m 05s``, ``2h 07m``."""
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m {s % 60:02d}s"
    return f"{s // 3600}h {(s % 3600) // 60:02d}m"
