"""On failure: the first failing rank and its traceback, shown at the top of the panel."""

from __future__ import annotations

import ipywidgets as w

from aviflow.records import FailureInfo
from aviflow_magics._snapshot import JobSnapshot
from aviflow_magics.widgets._html import esc


def failure_html(failure: FailureInfo) -> str:
    where, what, trace = failure.where(), failure.what(), failure.detail()
    return (
        "<div class='aviflow-failure' style='border-left:4px solid #b91c1c;background:#fef2f2;"
        "padding:4px 8px'>"
        f"<b>First failure: {esc(where)}</b> &mdash; {esc(what)}"
        f"<pre style='max-height:240px;overflow:auto;font-size:11px;margin:4px 0'>{esc(trace)}</pre>"
        "</div>"
    )


class FailureBox(w.HTML):
    """Hidden until the job has a failure record."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.layout.display = "none"

    def update_from(self, snap: JobSnapshot) -> None:
        if snap.failure:
            self.value = failure_html(snap.failure)
            self.layout.display = None
        else:
            self.value = ""
            self.layout.display = "none"
