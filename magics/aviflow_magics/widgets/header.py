"""The panel's header: name, id, status badge, elapsed time, GPU-hours, queue position."""

from __future__ import annotations

import ipywidgets as w

from aviflow.views.sections import header_html
from aviflow.views.snapshot import JobSnapshot


class JobHeader(w.HTML):
    """One HTML line; re-rendered from each snapshot (unchanged text sends nothing)."""

    def update_from(self, snap: JobSnapshot) -> None:
        self.value = header_html(snap)
