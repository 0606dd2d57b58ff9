"""Small HTML helpers shared by every job view (escaping, badges, durations).

Every value a renderer interpolates goes through :func:`esc` or :func:`num`, whatever its
declared type: a job writes its own metrics, checkpoint markers and logs, so a field typed
``int`` can hold any JSON at runtime, and a renderer must not trust a parser to have caught it.

>>> num(3), num(0.5, ".2f"), num("<b>", ".2f")
('3', '0.50', '&lt;b&gt;')
"""

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
    """``value`` as text in HTML (element content or a quoted attribute value)."""
    return html.escape(str(value), quote=True)


def num(value: object, spec: str = "") -> str:
    """A number formatted with ``spec`` (``format(value, spec)``); anything else (a string
    where a number belongs) is shown as escaped text instead of failing the whole page."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return esc(format(value, spec))
    return esc(value)


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
