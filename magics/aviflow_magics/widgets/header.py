"""The panel's header: name, id, status badge, elapsed time, GPU-hours, queue position."""

from __future__ import annotations

import ipywidgets as w

from aviflow.records import JobState
from aviflow_magics._snapshot import JobSnapshot
from aviflow_magics.widgets._html import badge, duration, esc


def header_html(snap: JobSnapshot) -> str:
    parts = [
        f"<b class='aviflow-name'>{esc(snap.name)}</b>",
        f"<code class='aviflow-id'>{esc(snap.id)}</code>",
        badge(snap.state.value),
        f"<span class='aviflow-elapsed'>elapsed {duration(snap.elapsed)}</span>",
        f"<span class='aviflow-gpu-hours'>{snap.gpu_hours:.4f} GPU-h</span>",
        f"<span>{snap.nodes}&times;{snap.gpus_per_node} GPUs</span>",
    ]
    if snap.attempt > 1:
        parts.append(f"<span>attempt {snap.attempt}</span>")
    line = " &nbsp;·&nbsp; ".join(parts)
    detail = ""
    if snap.state is JobState.QUEUED:
        pos = f"position {snap.queue_position} in the queue" if snap.queue_position else "queued"
        detail = f"<div class='aviflow-queue'>{esc(pos)}: {esc(snap.message)}</div>"
    elif snap.message and snap.state is not JobState.RUNNING:
        detail = f"<div class='aviflow-message'>{esc(snap.message)}</div>"
    return f"<div class='aviflow-header'>{line}{detail}</div>"


class JobHeader(w.HTML):
    """One HTML line; re-rendered from each snapshot (unchanged text sends nothing)."""

    def update_from(self, snap: JobSnapshot) -> None:
        self.value = header_html(snap)
