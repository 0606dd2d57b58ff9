"""Per-node, per-rank state: one row per node, one badge per rank."""

from __future__ import annotations

import ipywidgets as w

from aviflow_magics._snapshot import JobSnapshot
from aviflow_magics.widgets._html import badge

MAX_RANKS_SHOWN = 64


def ranks_html(snap: JobSnapshot) -> str:
    if len(snap.ranks) > MAX_RANKS_SHOWN:
        counts: dict[str, int] = {}
        for r in snap.ranks:
            counts[r.state] = counts.get(r.state, 0) + 1
        shown = " ".join(f"{badge(s, 'aviflow-rank-state')} &times;{n}" for s, n in counts.items())
        return f"<div class='aviflow-ranks' style='font-size:12px'>{len(snap.ranks)} ranks: {shown}</div>"
    rows = []
    for node in range(snap.nodes):
        cells = " ".join(
            f"<span class='aviflow-rank' data-rank='{r.rank}'>rank {r.rank} "
            f"{badge(r.state, 'aviflow-rank-state')}</span>"
            for r in snap.ranks
            if r.node == node
        )
        rows.append(
            f"<div class='aviflow-node' data-node='{node}'><b>node {node}</b>: {cells}</div>"
        )
    return "<div class='aviflow-ranks' style='font-size:12px'>" + "".join(rows) + "</div>"


class RankGrid(w.HTML):
    def update_from(self, snap: JobSnapshot) -> None:
        self.value = ranks_html(snap)
