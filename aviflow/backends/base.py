"""The backend interface.

A backend turns a validated :class:`~aviflow.spec.TrainJob` plus its code bundle into a
running job and answers questions about it. Override exactly these:

``submit(job, bundle) -> id``, ``status(id) -> dict``, ``cancel(id)``, ``list_ids()``,
``run_dir(id)`` (where its run-store record is readable).

Reads (events, logs, metrics, checkpoints, spec) go through the run store by default; a
backend without a readable run store (the hub client) overrides them too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from aviflow.bundle import CodeBundle
from aviflow.spec import TrainJob
from aviflow.status import Event
from aviflow.store import RunDir


class Backend(ABC):
    name: ClassVar[str]

    @abstractmethod
    def submit(self, job: TrainJob, bundle: CodeBundle) -> str:
        """Record and start (or queue) the job; return its id. Raise before writing anything
        when the job can never run here."""

    @abstractmethod
    def status(self, job_id: str) -> dict[str, Any]:
        """The job's status record: at least ``state`` and ``attempt``."""

    @abstractmethod
    def cancel(self, job_id: str) -> bool:
        """Stop the job and every process or object it has; False if it had already finished."""

    @abstractmethod
    def list_ids(self) -> list[str]:
        """Ids of the jobs this backend knows, oldest first."""

    @abstractmethod
    def run_dir(self, job_id: str) -> RunDir:
        """The job's run-store directory."""

    # -- reads through the run store ------------------------------------------------------------
    def spec(self, job_id: str) -> TrainJob:
        return self.run_dir(job_id).spec()

    def meta(self, job_id: str) -> dict[str, Any]:
        return self.run_dir(job_id).meta()

    def events(self, job_id: str) -> list[Event]:
        return self.run_dir(job_id).events()

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return self.run_dir(job_id).metrics()

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        return self.run_dir(job_id).checkpoints()

    def failures(self, job_id: str) -> list[dict[str, Any]]:
        return self.run_dir(job_id).failures()

    def ranks(self, job_id: str) -> list[int]:
        return self.run_dir(job_id).ranks()

    def log_text(self, job_id: str, rank: int) -> str:
        path = self.run_dir(job_id).rank_log(rank)
        try:
            return path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
