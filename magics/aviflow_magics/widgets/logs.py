"""The log viewer: a rank selector, a tail length, and the last lines of that log."""

from __future__ import annotations

import threading
from collections.abc import Callable

import ipywidgets as w

from aviflow.views.sections import log_html
from aviflow.views.snapshot import JobSnapshot

ALL = -1
LogReader = Callable[[int | None, int], str]


class LogViewer(w.VBox):
    """``reader(rank or None, tail) -> text`` supplies the log (a Job's ``logs``)."""

    def __init__(self, reader: LogReader, tail: int = 40, **kwargs: object) -> None:
        self.reader = reader
        self.rank = w.Dropdown(
            options=[("all ranks", ALL)],
            value=ALL,
            description="log",
            layout=w.Layout(width="180px"),
        )
        self.tail = w.BoundedIntText(
            value=tail, min=1, max=2000, step=10, description="tail", layout=w.Layout(width="140px")
        )
        self.text = w.HTML(value=log_html(""))
        self._lock = threading.Lock()
        super().__init__(children=[w.HBox([self.rank, self.tail]), self.text], **kwargs)
        self.rank.observe(lambda _c: self.refresh(), names="value")
        self.tail.observe(lambda _c: self.refresh(), names="value")

    def refresh(self) -> None:
        with self._lock:
            rank = None if self.rank.value == ALL else int(self.rank.value)
            self.text.value = log_html(self.reader(rank, int(self.tail.value)))

    def update_from(self, snap: JobSnapshot) -> None:
        options = [("all ranks", ALL)] + [(f"rank {r}", r) for r in snap.log_ranks]
        if list(self.rank.options) != options:
            current = self.rank.value
            self.rank.options = options
            self.rank.value = current if current in [v for _, v in options] else ALL
        self.refresh()
