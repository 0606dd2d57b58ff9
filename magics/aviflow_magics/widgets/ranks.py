"""Per-node, per-rank state: one row per node, one badge per rank."""

from __future__ import annotations

import ipywidgets as w

from aviflow.views.sections import ranks_html
from aviflow.views.snapshot import JobSnapshot


class RankGrid(w.HTML):
    def update_from(self, snap: JobSnapshot) -> None:
        self.value = ranks_html(snap)
