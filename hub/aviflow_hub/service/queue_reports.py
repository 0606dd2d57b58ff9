"""The backend's own view of the queues, read in the background for aviflow-api's queue record.

aviflow-api's queues come from the ledger (:func:`aviflow_hub.service.queues.queue_quotas`),
so they answer while the backend stalls; what only the backend knows (the GPUs a queue
borrows from its cohort and those its cohort lends it, Kueue's ClusterQueue status, and its
waiting jobs in Kueue's order) comes from the last :meth:`~aviflow.backends.base.Backend.queues`
that :meth:`QueueReports.refresh` read. The service calls :meth:`QueueReports.refresh_if_watched`
every :data:`REFRESH_EVERY` seconds in a lane of its own, for backends that declare
``reports_borrowing``: it reads the backend only while someone looked at the queues (a
:meth:`QueueReports.latest`) in the last :data:`WATCHED_FOR` seconds, so an idle hub asks
Kueue nothing; the first look after an idle spell calls ``on_wake`` (the service starts a
refresh at once), and a view that old is not shown (the ledger's numbers stand alone until the
refresh lands). A refresh that fails keeps the last view and is logged. :class:`QueueRefresher`
does the service's part: the first read, the ticks, the wake, one read at a time.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType

from tornado.ioloop import IOLoop, PeriodicCallback

from aviflow.backends.base import Backend
from aviflow.errors import AviflowError
from aviflow.records import QueueQuota
from aviflow_hub.service.lanes import Lane

log = logging.getLogger("aviflow_hub.service")
REFRESH_EVERY = 10.0  # seconds
WATCHED_FOR = 300.0  # seconds after the last look at the queues that refreshes go on


class QueueReports:
    """The last queue records the backend reported, by queue name."""

    def __init__(self, backend: Backend, clock: Callable[[], float] = time.monotonic) -> None:
        self.backend = backend
        self._clock = clock
        self._latest: Mapping[str, QueueQuota] = MappingProxyType({})
        self._read_at: float | None = None
        self._looked_at: float | None = None
        self.failures = 0  # refreshes that failed in a row
        self.on_wake: Callable[[], None] | None = None  # the first look after an idle spell

    def watched(self) -> bool:
        """Whether someone looked at the queues in the last :data:`WATCHED_FOR` seconds."""
        return self._looked_at is not None and self._clock() - self._looked_at < WATCHED_FOR

    def refresh_if_watched(self) -> bool:
        """:meth:`refresh` while the queues are watched (blocks: run it in a lane); whether it
        read the backend."""
        if not self.watched():
            return False
        self.refresh()
        return True

    def refresh(self) -> None:
        """Read the backend's queues (blocks: run it in a lane); on a backend error keep the
        last view and log why."""
        try:
            found = self.backend.queues()
        except AviflowError as exc:
            self.failures += 1
            log.warning("reading the backend's queues failed (%d in a row): %s", self.failures, exc)
            return
        self.failures = 0
        self._latest = MappingProxyType({q.queue: q for q in found})
        self._read_at = self._clock()

    def latest(self) -> Mapping[str, QueueQuota]:
        """The last view read, never waiting on the backend: empty before the first and once
        it is :data:`WATCHED_FOR` seconds old (after an idle spell, or that long failing),
        rather than stale; a look that keeps the refreshes going (and, after an idle spell,
        calls ``on_wake``)."""
        now = self._clock()
        waking = not self.watched()
        self._looked_at = now
        if waking and self.on_wake is not None:
            self.on_wake()
        if self._read_at is None or now - self._read_at >= WATCHED_FOR:
            return MappingProxyType({})
        return self._latest


class QueueRefresher:
    """The service's reads of ``reports`` in ``lane`` (its own, of one worker): one at
    :meth:`start`, then one every :data:`REFRESH_EVERY` seconds while the queues are watched,
    and one at once when a look ends an idle spell (``on_wake``). One read at a time: a tick
    or a wake while a read waits on the backend does nothing."""

    def __init__(self, reports: QueueReports, lane: Lane) -> None:
        self.reports = reports
        self.lane = lane
        self._reading = asyncio.Lock()
        self._ticks = PeriodicCallback(self.read, REFRESH_EVERY * 1000)

    async def read(self, first: bool = False) -> None:
        """A refresh while the queues are watched (``first``: in any case); a failure is
        logged, never raised."""
        if self._reading.locked():
            return  # the last read still waits on the backend
        reports = self.reports
        async with self._reading:
            try:
                await self.lane.run(reports.refresh if first else reports.refresh_if_watched)
            except Exception:
                log.exception("reading the backend's queues failed")

    async def start(self) -> None:
        """The first read (a view for the first look), then the ticks and the wake (on the
        running IOLoop)."""
        await self.read(first=True)
        loop = IOLoop.current()
        self.reports.on_wake = lambda: loop.spawn_callback(self.read)
        self._ticks.start()

    def stop(self) -> None:
        self._ticks.stop()
        self.reports.on_wake = None
