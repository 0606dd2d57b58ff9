"""``Job``: a handle on one submitted job, from any process, at any time."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from aviflow.backends import Backend
from aviflow.spec import TrainJob
from aviflow.status import Event, JobState, Usage, usage_from_events

if TYPE_CHECKING:
    import pandas as pd


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
    def name(self) -> str:
        return self.spec.metadata.name

    def status_record(self) -> dict[str, Any]:
        return self.backend.status(self.id)

    @property
    def status(self) -> JobState:
        return JobState(self.status_record().get("state", JobState.QUEUED))

    @property
    def failure(self) -> dict[str, Any] | None:
        """The first failing rank and its traceback, once the job has FAILED."""
        return self.status_record().get("failure")

    def events(self) -> list[Event]:
        return self.backend.events(self.id)

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
        """One rank's log, or every rank's (each line prefixed ``[rank R]``); last ``tail`` lines."""
        if rank is not None:
            lines = self.backend.log_text(self.id, rank).splitlines()
        else:
            lines = [
                f"[rank {r}] {line}"
                for r in self.backend.ranks(self.id)
                for line in self.backend.log_text(self.id, r).splitlines()
            ]
        if tail is not None:
            lines = lines[-tail:] if tail > 0 else []
        return "\n".join(lines) + ("\n" if lines else "")

    def metric_rows(self) -> list[dict[str, Any]]:
        """``{"step", "time", "attempt", <metric>: value, ...}`` per logged step."""
        return [
            {"step": r["step"], "time": r["time"], "attempt": r.get("attempt", 1), **r["values"]}
            for r in self.backend.metrics(self.id)
        ]

    def metrics(self) -> pd.DataFrame | list[dict[str, Any]]:
        """Logged metrics: a pandas DataFrame when pandas is installed, else a list of rows."""
        rows = self.metric_rows()
        try:
            import pandas as pd
        except ImportError:
            return rows
        return pd.DataFrame(rows, columns=None if rows else ["step", "time", "attempt"])

    def checkpoints(self) -> list[dict[str, Any]]:
        """Complete checkpoints, oldest first: ``{"step", "path", "time", "attempt"}``."""
        return self.backend.checkpoints(self.id)

    def latest_checkpoint(self) -> dict[str, Any] | None:
        found = self.checkpoints()
        return found[-1] if found else None

    def usage(self) -> Usage:
        """Allocated GPU time: nodes x gpusPerNode x running time, summed over attempts."""
        return usage_from_events(self.events(), self.spec.spec.total_gpus)
