"""The controller's work queue: job ids to reconcile, each handed to one worker at a time."""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class WorkQueue:
    """A set of job ids to reconcile; an id being reconciled is not handed out twice."""

    def __post_init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: dict[str, None] = {}
        self.busy: set[str] = set()
        self.again: set[str] = set()
        self.closed = False

    def put(self, job_id: str) -> None:
        with self.cond:
            if job_id in self.busy:
                self.again.add(job_id)
            else:
                self.waiting[job_id] = None
                self.cond.notify()

    def take(self) -> str | None:
        with self.cond:
            while not self.waiting and not self.closed:
                self.cond.wait()
            if self.closed:
                return None
            job_id = next(iter(self.waiting))
            del self.waiting[job_id]
            self.busy.add(job_id)
            return job_id

    def done(self, job_id: str) -> None:
        with self.cond:
            self.busy.discard(job_id)
            if job_id in self.again:
                self.again.discard(job_id)
                self.waiting[job_id] = None
                self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
