"""The controller's work queue: job ids to reconcile, each handed to one worker at a time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class WorkQueue:
    """A set of job ids to reconcile; an id being reconciled is not handed out twice."""

    def __post_init__(self) -> None:
        self.cond = threading.Condition()
        self.waiting: dict[str, None] = {}
        self.busy: dict[str, float] = {}  # job id -> when its reconcile began (monotonic)
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
            self.busy[job_id] = time.monotonic()
            return job_id

    def done(self, job_id: str) -> None:
        with self.cond:
            self.busy.pop(job_id, None)
            if job_id in self.again:
                self.again.discard(job_id)
                self.waiting[job_id] = None
                self.cond.notify()

    def longest_busy(self) -> tuple[str, float] | None:
        """The job id reconciled for the longest now, and for how many seconds; None if idle."""
        with self.cond:
            if not self.busy:
                return None
            job_id, began = min(self.busy.items(), key=lambda kv: kv[1])
            return job_id, time.monotonic() - began

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
