"""The one writer of the ledger's job state: the backend's change feed, applied every poll.

``Ingest.step()`` polls the feed (:meth:`aviflow.backends.base.Backend.changes`, started with
the jobs the ledger already has final) and applies each poll's changes
(:meth:`aviflow_hub.ledger.store.Ledger.apply`). The service calls it every
``api.ingestEvery`` seconds in its thread pool; request handlers only read the ledger.

A job the feed cannot read, or the ledger cannot store, is logged and kept in
:attr:`Ingest.problems`; the other jobs go on. A job whose change could not be stored is read
again from its first event (:meth:`~aviflow.backends._feed.ChangeFeed.reread`) after a delay
that doubles with each failure (1 s to 60 s), so a lost database connection costs a second,
and a job that can never be stored costs one attempt a minute.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aviflow.backends._feed import ChangeFeed
from aviflow.backends.base import Backend
from aviflow_hub.ledger.store import Ledger

log = logging.getLogger("aviflow_hub.service")
FIRST_RETRY = 1.0
MAX_RETRY = 60.0


class Ingest:
    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        first_retry: float = FIRST_RETRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.first_retry = first_retry
        self.clock = clock
        self.feed: ChangeFeed | None = None
        self._unstored: dict[str, str] = {}
        self._retry: dict[str, tuple[float, float]] = {}  # job -> (when, delay)

    @property
    def problems(self) -> dict[str, str]:
        """``{job id: why}`` for jobs not (fully) in the ledger: unreadable or unstorable."""
        read = dict(self.feed.problems) if self.feed is not None else {}
        return {**read, **self._unstored}

    def step(self) -> int:
        """One poll of the feed into the ledger; the number of changes applied."""
        if self.feed is None:
            self.feed = self.backend.changes(done=self.ledger.finished_ids())
        now = self.clock()
        for job_id, (when, _) in list(self._retry.items()):
            if now >= when:
                self.feed.reread(job_id)
        changes = self.feed.poll()
        failed = self.ledger.apply(changes)
        for change in changes:
            pending = change.job_id in self._retry
            if pending and not change.reset:
                continue  # a later change of a job waiting to be read again: that read covers it
            if change.job_id in failed:
                _, delay = self._retry.get(change.job_id, (0.0, self.first_retry / 2))
                delay = min(delay * 2, MAX_RETRY)
                self._retry[change.job_id] = (now + delay, delay)
                self._unstored[change.job_id] = failed[change.job_id]
            else:
                self._retry.pop(change.job_id, None)
                self._unstored.pop(change.job_id, None)
        return len(changes) - len(failed)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None
