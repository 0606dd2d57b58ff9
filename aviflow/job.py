"""``Job``: a handle on one submitted job, from any process, at any time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow.attempts import Usage, attempts_from_events, job_info, usage
from aviflow.backends import Backend
from aviflow.paging import MAX_PAGE_ROWS, read_pages
from aviflow.records import (
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobState,
    JobStatus,
    MetricRow,
)
from aviflow.spec import TrainJob

if TYPE_CHECKING:
    import pandas as pd

BATCH_PAGES = 10  # pages one metric_batch() reads at most


class Job:
    """A submitted job. Cheap to create; every property reads the current state."""

    def __init__(self, job_id: str, backend: Backend) -> None:
        self.id = job_id
        self.backend = backend

    def __repr__(self) -> str:
        return f"<aviflow.Job {self.id} {self.status.value}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    # -- state -----------------------------------------------------------------------------------
    @property
    def spec(self) -> TrainJob:
        return self.backend.spec(self.id)

    @property
    def meta(self) -> JobMeta:
        return self.backend.meta(self.id)

    @property
    def name(self) -> str:
        return self.spec.metadata.name

    def status_record(self) -> JobStatus:
        """The whole status record (state, attempt, message, queue position, failure)."""
        return self.backend.status(self.id)

    @property
    def status(self) -> JobState:
        return self.status_record().state

    @property
    def failure(self) -> FailureInfo | None:
        """The first failing rank and its traceback, once the job has FAILED."""
        return self.status_record().failure

    def events(self) -> list[Event]:
        """Every event of the job, oldest first (read page by page)."""
        return read_pages(lambda at: self.backend.events(self.id, at, MAX_PAGE_ROWS)).items

    def wait(self, timeout: float | None = None, poll: float = 0.5) -> JobState:
        """Block until the job finishes; return its final state. TimeoutError after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            state = self.status
            if state.is_finished():
                return state
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {self.id} is still {state.value} after {timeout}s")
            time.sleep(poll)

    def cancel(self) -> bool:
        """Stop every process of the job; False if it had already finished."""
        return self.backend.cancel(self.id)

    # -- outputs ---------------------------------------------------------------------------------
    def logs(self, rank: int | None = None, tail: int | None = None) -> str:
        """One rank's log, or every rank's (each line prefixed ``[rank R]``); the last ``tail``
        lines of each. Reading a tail costs the tail, not the whole log."""
        if rank is not None:
            return self.backend.log(self.id, rank, tail=tail).text
        lines = [
            f"[rank {r}] {line}"
            for r in self.backend.ranks(self.id)
            for line in self.backend.log(self.id, r, tail=tail).text.splitlines()
        ]
        return "\n".join(lines) + ("\n" if lines else "")

    def metric_rows(self, after_step: int | None = None) -> list[dict[str, Any]]:
        """``{"step", "time", "attempt", <metric>: value, ...}`` per logged step (only steps
        after ``after_step`` if given): every row, read page by page."""
        pages = read_pages(
            lambda at: self.backend.metrics(self.id, at, after_step, limit=MAX_PAGE_ROWS)
        )
        return [
            {"step": r.step, "time": r.time, "attempt": r.attempt, **r.values} for r in pages.items
        ]

    def metrics(self, after_step: int | None = None) -> pd.DataFrame | list[dict[str, Any]]:
        """Logged metrics: a pandas DataFrame when pandas is installed, else a list of rows."""
        rows = self.metric_rows(after_step)
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows, columns=None if rows else ["step", "time", "attempt"])

    def metric_batch(self, since: int = 0) -> tuple[list[MetricRow], int]:
        """Metric rows after cursor ``since`` (at most :data:`BATCH_PAGES` pages of them, so a
        call costs the same after a million steps) and the cursor to continue from."""
        batch = read_pages(
            lambda at: self.backend.metrics(self.id, at, limit=MAX_PAGE_ROWS), since, BATCH_PAGES
        )
        return batch.items, batch.next

    def checkpoints(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first."""
        return self.backend.checkpoints(self.id)

    def latest_checkpoint(self) -> CheckpointRef | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def checkpoint_path(self, ref: CheckpointRef | None = None) -> Path:
        """Where ``ref`` (default: the latest checkpoint) is on this machine, for
        ``accelerator.load_state``. Raises JobNotFound when there is none."""
        from aviflow.errors import JobNotFound

        ref = ref or self.latest_checkpoint()
        if ref is None:
            raise JobNotFound(f"job {self.id} has no complete checkpoint yet")
        return self.backend.checkpoint_path(ref)

    def usage(self) -> Usage:
        """Allocated GPU time: nodes x gpusPerNode x time held, summed over attempts."""
        info = job_info(self.meta, self.spec)
        return usage(attempts_from_events(info, self.events()), info.gpus, time.time())
