"""The controller's work queue: job ids to reconcile, each handed to one worker at a time.

Two lanes: an id put ``urgent`` (a new submission, whose first reconcile creates its attempt
Job) is handed out before every id of the normal lane (children's changes, ticks), each lane
in the order its ids were first put. Put urgent while waiting in the normal lane, an id moves
to the end of the urgent lane; put again in its own lane, it keeps its place. An id put while
it is being reconciled is queued again when its reconcile is done, urgent if any of those
puts was.

>>> q = WorkQueue()
>>> for job_id, urgent in (("a", False), ("b", False), ("c", True), ("b", True)):
...     q.put(job_id, urgent=urgent)
>>> q.waiting
['c', 'b', 'a']
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass


@dataclass
class WorkQueue:
    """Job ids to reconcile in two lanes (see the module docstring); an id being reconciled
    is not handed out twice."""

    def __post_init__(self) -> None:
        self.cond = threading.Condition()
        self._urgent: dict[str, None] = {}
        self._normal: dict[str, None] = {}
        self.busy: dict[str, float] = {}  # job id -> when its reconcile began (monotonic)
        self.again: dict[str, bool] = {}  # put while busy -> whether one of those was urgent
        self.closed = False

    @property
    def waiting(self) -> list[str]:
        """The ids waiting, in the order they will be handed out."""
        with self.cond:
            return [*self._urgent, *self._normal]

    def put(self, job_id: str, urgent: bool = False) -> None:
        with self.cond:
            if job_id in self.busy:
                self.again[job_id] = self.again.get(job_id, False) or urgent
            else:
                self._wait(job_id, urgent)

    def _wait(self, job_id: str, urgent: bool) -> None:
        """Put ``job_id`` in its lane; the lock is held."""
        if urgent:
            self._normal.pop(job_id, None)
            self._urgent[job_id] = None  # one there already keeps its place
        elif job_id not in self._urgent:
            self._normal[job_id] = None
        self.cond.notify()

    def take(self) -> str | None:
        with self.cond:
            while not (self._urgent or self._normal) and not self.closed:
                self.cond.wait()
            if self.closed:
                return None
            lane = self._urgent or self._normal
            job_id = next(iter(lane))
            del lane[job_id]
            self.busy[job_id] = time.monotonic()
            return job_id

    def done(self, job_id: str) -> None:
        with self.cond:
            self.busy.pop(job_id, None)
            urgent = self.again.pop(job_id, None)
            if urgent is not None:
                self._wait(job_id, urgent)

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
