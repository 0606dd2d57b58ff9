"""On failure: the first failing rank and its traceback, shown at the top of the panel."""

from __future__ import annotations

import ipywidgets as w

from aviflow.views.sections import failure_html
from aviflow.views.snapshot import JobSnapshot


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
