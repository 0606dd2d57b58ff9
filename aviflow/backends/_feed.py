"""The change feed a reader (the hub's ledger) follows instead of rescanning every job.

:meth:`ChangeFeed.poll` returns one :class:`JobChange` per job whose status or events
changed since the last poll, with only the new events. :class:`PollingFeed`, the default
any backend gets, reads each unfinished job's status and its events from the last cursor
(a stat-sized read per job and poll); a job is never read again once its final status has
been reported. A writer records a job's events, then its status, so the status is read first
and the events after it: a final event read beside a status that is not final yet (the
status was read just before the writer wrote it) has its status read again, and the job is
done only once a final status has gone out with it (or after it), never with a stale one. A job that cannot be read is reported in :attr:`ChangeFeed.problems` and
skipped, so one broken job never stops the feed.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from aviflow.attempts import JobInfo, job_info
from aviflow.errors import AviflowError
from aviflow.paging import MAX_PAGE_ROWS, read_pages
from aviflow.records import Event, JobMeta, JobStatus

if TYPE_CHECKING:
    from aviflow.backends.base import Backend
    from aviflow.spec import TrainJob

log = logging.getLogger("aviflow.feed")


@dataclass(frozen=True)
class JobChange:
    """What changed in one job. ``reset``: ``events`` start at the job's first event (the
    reader forgets what it had); ``meta`` and ``spec`` come with the first change of a job."""

    job_id: str
    status: JobStatus
    events: list[Event] = field(default_factory=list)
    reset: bool = False
    meta: JobMeta | None = None
    spec: TrainJob | None = None

    @property
    def info(self) -> JobInfo | None:
        return job_info(self.meta, self.spec) if self.meta and self.spec else None


class ChangeFeed(ABC):
    """A reader's position in a backend's stream of changes."""

    def __init__(self) -> None:
        self.problems: dict[str, str] = {}

    @abstractmethod
    def poll(self) -> list[JobChange]:
        """The changes since the last poll (the first poll reports every unfinished job)."""

    @abstractmethod
    def reread(self, job_id: str) -> None:
        """Report ``job_id`` from its first event again at the next poll (``reset``): for a
        reader that could not store a change and must start that job over."""

    def close(self) -> None:
        """Release what the feed holds (a watch, a thread)."""
        return None


class PollingFeed(ChangeFeed):
    """A change feed over any backend's reads (see the module docstring)."""

    def __init__(self, backend: Backend, done: Iterable[str] = ()) -> None:
        super().__init__()
        self.backend = backend
        self._done = set(done)
        self._cursor: dict[str, int] = {}
        self._status: dict[str, JobStatus] = {}

    def poll(self) -> list[JobChange]:
        out = []
        for job_id in self.backend.list_ids():
            if job_id in self._done:
                continue
            try:
                change = self._read(job_id)
            except (AviflowError, OSError, ValueError, KeyError, TypeError) as exc:
                message = f"{type(exc).__name__}: {exc}"
                if self.problems.get(job_id) != message:
                    log.warning("job %s cannot be read, skipped: %s", job_id, message)
                self.problems[job_id] = message
                continue
            self.problems.pop(job_id, None)
            if change is not None:
                out.append(change)
        return out

    def reread(self, job_id: str) -> None:
        self._done.discard(job_id)
        self._cursor.pop(job_id, None)
        self._status.pop(job_id, None)

    def _read(self, job_id: str) -> JobChange | None:
        first = job_id not in self._cursor
        status = self.backend.status(job_id)  # before the events: they are written first
        batch = read_pages(
            lambda at: self.backend.events(job_id, at, MAX_PAGE_ROWS), self._cursor.get(job_id, 0)
        )
        if not first and not batch.items and status == self._status.get(job_id):
            return None
        change = JobChange(
            job_id,
            status,
            batch.items,
            reset=first,
            meta=self.backend.meta(job_id) if first else None,
            spec=self.backend.spec(job_id) if first else None,
        )
        last_state = next((e.type.state() for e in reversed(batch.items) if e.type.state()), None)
        if last_state is not None and last_state.is_finished() and not status.state.is_finished():
            status = self.backend.status(job_id)  # read before the writer wrote the end's
            change = replace(change, status=status)
        self._cursor[job_id] = batch.next
        self._status[job_id] = status
        if status.state.is_finished():  # written after its final event: every event is in
            self._done.add(job_id)
            self._cursor.pop(job_id, None)
            self._status.pop(job_id, None)
        return change
