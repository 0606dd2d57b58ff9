"""Live metric charts: each logged metric against step (loss first), as inline SVG.

Rendered in pure Python into an ``HTML`` widget, so it works in JupyterLab 4 and
Notebook 7 without a frontend build. Each series is downsampled to at most
``max_points`` (min and max of each bucket, so spikes survive), so the message size is
bounded however many points a job logs.
"""

from __future__ import annotations

import ipywidgets as w

from aviflow.views.sections import MAX_POINTS, charts_html, reading_so_far
from aviflow.views.snapshot import JobSnapshot


class MetricChart(w.HTML):
    """Every numeric metric against step; re-rendered only when a series changed."""

    def __init__(self, max_points: int = MAX_POINTS, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.max_points = max_points
        self._seen: tuple = ()
        self.value = charts_html({})

    def update_from(self, snap: JobSnapshot) -> None:
        reading = reading_so_far(snap)
        key = (reading, *((n, len(p), p[-1] if p else None) for n, p in snap.metrics.items()))
        if key != self._seen:
            self._seen = key
            self.value = charts_html(snap.metrics, self.max_points, read_so_far=reading)
