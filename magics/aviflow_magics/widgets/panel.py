"""The job panel: the widgets laid out, fed snapshots by a background poller.

Used as (``job`` an :class:`aviflow.job.Job`)::

    panel = JobPanel(job)          # starts polling; display(panel) shows it
    panel.stop()                   # stops the poller (it also stops once the job ends)
"""

from __future__ import annotations

import threading

import ipywidgets as w

from aviflow.job import Job
from aviflow.views.html import esc
from aviflow.views.snapshot import JobSnapshot
from aviflow_magics._poller import Poller
from aviflow_magics.widgets._sync import hold_sync_all
from aviflow_magics.widgets.cancel import CancelButton
from aviflow_magics.widgets.chart import MetricChart
from aviflow_magics.widgets.checkpoints import CheckpointList
from aviflow_magics.widgets.failure import FailureBox
from aviflow_magics.widgets.header import JobHeader
from aviflow_magics.widgets.logs import LogViewer
from aviflow_magics.widgets.ranks import RankGrid

_SECTION = "<div style='font-size:12px;font-weight:600;margin-top:6px'>{}</div>"


class JobPanel(w.VBox):
    """A live view of one job. Updates arrive from a poller thread, batched per snapshot."""

    def __init__(
        self,
        job: Job,
        interval: float = 1.0,
        max_updates_per_second: float = 2.0,
        start: bool = True,
        **kwargs: object,
    ) -> None:
        self.job = job
        self.failure = FailureBox()
        self.header = JobHeader()
        self.cancel = CancelButton(job.cancel)
        self.ranks = RankGrid()
        self.chart = MetricChart()
        self.logs = LogViewer(lambda rank, tail: job.logs(rank=rank, tail=tail))
        self.checkpoints = CheckpointList(job.checkpoint_path)
        self.error = w.HTML(value="")
        self._lock = threading.Lock()
        self.last: JobSnapshot | None = None
        super().__init__(
            children=[
                self.failure,
                w.HBox(
                    [self.header, self.cancel], layout=w.Layout(justify_content="space-between")
                ),
                self.ranks,
                w.HTML(_SECTION.format("Metrics")),
                self.chart,
                w.HTML(_SECTION.format("Logs")),
                self.logs,
                w.HTML(_SECTION.format("Checkpoints")),
                self.checkpoints,
                self.error,
            ],
            layout=w.Layout(border="1px solid #e5e7eb", padding="6px"),
            **kwargs,
        )
        self.add_class("aviflow-panel")
        self.poller = Poller(
            job,
            self.apply,
            on_error=self.show_error,
            interval=interval,
            max_updates_per_second=max_updates_per_second,
        )
        if start:
            self.poller.start()

    def apply(self, snap: JobSnapshot) -> None:
        """Render one snapshot: every changed trait of every widget leaves in one batch."""
        with self._lock, hold_sync_all(self):
            for part in (
                self.failure,
                self.header,
                self.cancel,
                self.ranks,
                self.chart,
                self.logs,
                self.checkpoints,
            ):
                part.update_from(snap)
            self.error.value = ""
            self.last = snap

    def show_error(self, message: str) -> None:
        self.error.value = f"<div style='color:#b91c1c;font-size:11px'>{esc(message)}</div>"

    def stop(self) -> None:
        self.poller.stop()

    def close(self) -> None:
        self.stop()
        super().close()
