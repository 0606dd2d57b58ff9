"""``%aviflow_jobs``: one row per job, newest first (HTML in a notebook, text elsewhere)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aviflow.job import Job
from aviflow.status import JobState, usage_from_events
from aviflow_magics.widgets._html import badge, duration, esc

COLUMNS = ("id", "name", "state", "GPUs", "submitted", "elapsed", "GPU-h", "origin")


def job_row(job: Job, now: float) -> dict[str, Any]:
    record = job.status_record()
    state = JobState(record.get("state", JobState.QUEUED))
    spec = job.spec
    meta = job.backend.meta(job.id)
    events = job.events()
    submitted = meta.get("submitted") or (events[0].time if events else now)
    end = next((e.time for e in reversed(events) if e.type in JobState.__members__
                and JobState(e.type).is_finished()), None)
    origin = meta.get("origin") or {}
    where = origin.get("notebook") or ""
    if origin.get("execution_count") is not None:
        where += f" [{origin['execution_count']}]"
    return {
        "id": job.id,
        "name": spec.metadata.name,
        "state": state.value,
        "GPUs": f"{spec.spec.nodes}x{spec.spec.gpus_per_node}",
        "submitted": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(submitted)),
        "elapsed": duration(((end or now) if state.is_finished() else now) - submitted),
        "GPU-h": f"{usage_from_events(events, spec.spec.total_gpus, now=now).gpu_hours:.4f}",
        "origin": where.strip(),
    }


@dataclass(frozen=True)
class JobsTable:
    rows: list[dict[str, Any]]
    total: int

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
        body = "".join(
            "<tr class='aviflow-job-row'>" + "".join(
                f"<td>{badge(r[c]) if c == 'state' else esc(r[c])}</td>" for c in COLUMNS) + "</tr>"
            for r in self.rows
        )
        note = f"<div style='font-size:11px'>{len(self.rows)} of {self.total} jobs</div>"
        return f"<table class='aviflow-jobs'><tr>{head}</tr>{body}</table>{note}"

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


def jobs_table(jobs: list[Job], limit: int = 20, now: float | None = None) -> JobsTable:
    now = time.time() if now is None else now
    newest = list(reversed(jobs))[: max(0, limit)]
    return JobsTable(rows=[job_row(j, now) for j in newest], total=len(jobs))
