"""``NotebookJob``: a :class:`~aviflow.job.Job` whose notebook display is its live panel."""

from __future__ import annotations

from typing import Any

from aviflow.job import Job


class NotebookJob(Job):
    """What ``%%aviflow_train`` and ``%aviflow_attach`` return; ``job.panel()`` is the widget."""

    _panel: Any = None

    def panel(self) -> Any:
        """The job's panel (created, and its poller started, on first use)."""
        if self._panel is None:
            from aviflow_magics.widgets.panel import JobPanel

            self._panel = JobPanel(self)
        return self._panel

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        bundle = dict(self.panel()._repr_mimebundle_(**kwargs) or {})
        bundle["text/plain"] = repr(self)
        return bundle
