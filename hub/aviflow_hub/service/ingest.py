"""The one writer of the ledger's job state: the backend's change feed, applied every poll.

``Ingest.step()`` polls the feed (:meth:`aviflow.backends.base.Backend.changes`, started with
the jobs the ledger already has final) and applies each poll's changes
(:meth:`aviflow_hub.ledger.store.Ledger.apply`). The service calls it every
``api.ingestEvery`` seconds in its thread pool; request handlers only read the ledger.

A job the feed cannot read, or the ledger cannot store, is logged and kept in
:attr:`Ingest.problems`; the other jobs go on. As the feed does not report a change twice, a
store failure makes the next step after ``resync_after`` seconds start a fresh feed, whose
first poll reports every unfinished job from its first event (``reset``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aviflow.backends._feed import ChangeFeed
from aviflow.backends.base import Backend
from aviflow_hub.ledger.store import Ledger

log = logging.getLogger("aviflow_hub.service")
RESYNC_SECONDS = 30.0


class Ingest:
    def __init__(
        self,
        backend: Backend,
        ledger: Ledger,
        resync_after: float = RESYNC_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.backend = backend
        self.ledger = ledger
        self.resync_after = resync_after
        self.clock = clock
        self.feed: ChangeFeed | None = None
        self._resync_at: float | None = None
        self._unstored: dict[str, str] = {}

    @property
    def problems(self) -> dict[str, str]:
        """``{job id: why}`` for jobs not (fully) in the ledger: unreadable or unstorable."""
        read = dict(self.feed.problems) if self.feed is not None else {}
        return {**read, **self._unstored}

    def step(self) -> int:
        """One poll of the feed into the ledger; the number of changes applied."""
        if self._resync_at is not None and self.clock() >= self._resync_at:
            log.info(
                "restarting the change feed to store what failed: %s",
                ", ".join(sorted(self._unstored)),
            )
            self.close()
        if self.feed is None:
            self.feed = self.backend.changes(done=self.ledger.finished_ids())
            self._resync_at = None
            self._unstored = {}
        changes = self.feed.poll()
        failed = self.ledger.apply(changes)
        self._unstored.update(failed)  # until the resync: later changes miss what failed
        if failed and self._resync_at is None:
            self._resync_at = self.clock() + self.resync_after
        return len(changes) - len(failed)

    def close(self) -> None:
        if self.feed is not None:
            self.feed.close()
            self.feed = None
