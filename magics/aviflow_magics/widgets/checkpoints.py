"""The checkpoint list, and a one-click snippet that loads one into this notebook."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import ipywidgets as w

from aviflow.errors import AviflowError
from aviflow.records import CheckpointRef
from aviflow.views.sections import checkpoints_html
from aviflow.views.snapshot import JobSnapshot
from aviflow_magics.widgets._sync import hold_sync_all

PathResolver = Callable[[CheckpointRef], Path]


def _comment(text: object) -> str:
    """``text`` as ``#`` comment lines: a line break in a job-written field (a checkpoint
    marker's step) must not turn the rest of it into code the user runs.

    >>> _comment("step 1\\nimport os")
    '# step 1\\n# import os\\n'
    """
    return "".join(f"# {line}\n" for line in str(text).splitlines() or [""])


def load_snippet(ref: CheckpointRef, path: Path | None, problem: str = "") -> str:
    """Python that loads checkpoint ``ref`` with accelerate's ``load_state``; ``path`` is
    where this notebook sees it (None: not readable here, ``problem`` says why)."""
    head = _comment(f"checkpoint step {ref.step} of job {ref.job_id}")
    if path is None:
        return head + _comment(problem)
    return (
        head + "from accelerate import Accelerator\n"
        "accelerator = Accelerator(cpu=True)  # drop cpu=True on a GPU machine\n"
        "# build model and optimizer as in the training cell, then:\n"
        "model, optimizer = accelerator.prepare(model, optimizer)\n"
        f"accelerator.load_state({str(path)!r})\n"
    )


class CheckpointList(w.VBox):
    """``resolve(ref)`` is where this notebook sees a checkpoint (a Job's ``checkpoint_path``)."""

    def __init__(self, resolve: PathResolver, **kwargs: object) -> None:
        self.resolve = resolve
        self.table = w.HTML(value="")
        self.choice = w.Dropdown(
            options=[], description="checkpoint", layout=w.Layout(width="260px")
        )
        self.load = w.Button(
            description="Load into this notebook",
            icon="download",
            tooltip="show Python that loads this checkpoint with accelerate",
            layout=w.Layout(width="220px"),
            disabled=True,
        )
        self.snippet = w.Textarea(
            value="", layout=w.Layout(width="100%", height="120px", display="none")
        )
        self._by_step: dict[int, CheckpointRef] = {}
        super().__init__(
            children=[self.table, w.HBox([self.choice, self.load]), self.snippet], **kwargs
        )
        self.load.on_click(lambda _b: self.show_snippet())

    def show_snippet(self) -> None:
        found = self._by_step.get(self.choice.value)
        if found is None:
            return
        try:
            path, problem = self.resolve(found), ""
        except AviflowError as exc:
            path, problem = None, str(exc)
        with hold_sync_all(self.snippet):
            self.snippet.value = load_snippet(found, path, problem)
            self.snippet.layout.display = None

    def update_from(self, snap: JobSnapshot) -> None:
        self._by_step = {c.step: c for c in snap.checkpoints}
        self.table.value = checkpoints_html(snap)
        options = [(f"step {s}", s) for s in self._by_step]
        if list(self.choice.options) != options:
            self.choice.options = options
            self.choice.value = options[-1][1] if options else None
        self.load.disabled = not options
