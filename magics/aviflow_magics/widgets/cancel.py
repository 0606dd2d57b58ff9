"""Cancel, with a confirmation step; the cancel itself runs off the kernel's main thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import ipywidgets as w

from aviflow.views.html import esc
from aviflow.views.snapshot import JobSnapshot
from aviflow_magics.widgets._sync import hold_sync_all


class CancelButton(w.HBox):
    """``canceller()`` stops the job (a Job's ``cancel``)."""

    def __init__(self, canceller: Callable[[], bool], **kwargs: object) -> None:
        self.canceller = canceller
        self.button = w.Button(
            description="Cancel",
            button_style="danger",
            icon="stop",
            tooltip="cancel this job (asks first)",
            layout=w.Layout(width="100px"),
        )
        self.confirm = w.Button(
            description="Yes, cancel",
            button_style="danger",
            layout=w.Layout(width="110px", display="none"),
        )
        self.keep = w.Button(description="No", layout=w.Layout(width="60px", display="none"))
        self.note = w.HTML(value="")
        super().__init__(children=[self.button, self.note, self.confirm, self.keep], **kwargs)
        self.button.on_click(lambda _b: self.ask())
        self.keep.on_click(lambda _b: self._asking(False))
        self.confirm.on_click(lambda _b: self.do_cancel())
        self._thread: threading.Thread | None = None

    def _asking(self, asking: bool, note: str = "") -> None:
        with hold_sync_all(self):
            self.button.layout.display = "none" if asking else None
            self.confirm.layout.display = None if asking else "none"
            self.keep.layout.display = None if asking else "none"
            self.note.value = note

    def ask(self) -> None:
        self._asking(True, "Cancel this job? Every rank is stopped.")

    def do_cancel(self) -> None:
        self._asking(False, "cancelling…")
        self.button.disabled = True

        def run() -> None:
            try:
                done = self.canceller()
                self.note.value = "cancelled" if done else "already finished"
            except Exception as exc:  # shown in the panel, not raised in a thread
                self.note.value = f"cancel failed: {esc(exc)}"  # an HTML widget
                self.button.disabled = False

        self._thread = threading.Thread(target=run, name="aviflow-cancel", daemon=True)
        self._thread.start()

    def update_from(self, snap: JobSnapshot) -> None:
        if snap.state.is_finished():
            with hold_sync_all(self):
                self.button.disabled = True
                self.confirm.layout.display = "none"
                self.keep.layout.display = "none"
