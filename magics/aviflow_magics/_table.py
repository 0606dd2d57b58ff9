"""``%aviflow_jobs``: one row per job, newest first (HTML in a notebook, text elsewhere)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aviflow.backends import Backend
from aviflow.records import JobSummary
from aviflow.views.html import badge, duration, esc

COLUMNS = ("id", "name", "state", "GPUs", "submitted", "elapsed", "GPU-h", "origin")


def job_row(summary: JobSummary, now: float) -> dict[str, Any]:
    s = summary
    origin = s.origin or {}
    where = str(origin.get("notebook") or "")
    if origin.get("execution_count") is not None:
        where += f" [{origin['execution_count']}]"
    end = (s.finished or now) if s.state.is_finished() else now
    return {
        "id": s.id,
        "name": s.name,
        "state": s.state.value,
        "GPUs": f"{s.nodes}x{s.gpus_per_node}",
        "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(s.submitted)),
        "elapsed": duration(max(0.0, end - s.submitted)),
        "GPU-h": f"{s.gpu_seconds / 3600:.4f}",
        "origin": where.strip(),
    }


@dataclass(frozen=True)
class JobsTable:
    rows: list[dict[str, Any]]
    more: bool = False  # older jobs exist beyond the limit

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
        body = "".join(
            "<tr class='aviflow-job-row'>"
            + "".join(f"<td>{badge(r[c]) if c == 'state' else esc(r[c])}</td>" for c in COLUMNS)
            + "</tr>"
            for r in self.rows
        )
        note = f"<div style='font-size:11px'>{esc(self.note())}</div>"
        return f"<table class='aviflow-jobs'><tr>{head}</tr>{body}</table>{note}"

    def note(self) -> str:
        if self.more:
            return f"the newest {len(self.rows)} jobs; --limit N shows more"
        return f"{len(self.rows)} job" + ("" if len(self.rows) == 1 else "s")

    def text(self) -> str:
        if not self.rows:
            return "no jobs\n"
        widths = {c: max(len(c), *(len(str(r[c])) for r in self.rows)) for c in COLUMNS}
        lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS)]
        lines += ["  ".join(str(r[c]).ljust(widths[c]) for c in COLUMNS) for r in self.rows]
        return "\n".join(line.rstrip() for line in lines) + "\n"

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:
        p.text(self.text())


def jobs_table(backend: Backend, limit: int = 20, now: float | None = None) -> JobsTable:
    """The newest ``limit`` jobs, from one summaries read (a single request through the hub)."""
    now = time.time() if now is None else now
    limit = max(0, limit)
    newest = backend.summaries(limit=limit + 1)
    rows = [job_row(s, now) for s in newest[:limit]]
    return JobsTable(rows=rows, more=len(newest) > limit)
