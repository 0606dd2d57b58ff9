"""Lanes: a bounded thread pool for each kind of blocking call aviflow-api makes.

Backend and ledger calls block (files, SQL, process control, the Kubernetes API), so
handlers run them in threads; each kind in its own :class:`Lane`, so that one that stalls
(an API server that stops answering, a run store on a hung NFS mount) holds only the
requests that need it:

``ledger``
    The database alone: job lists, queues, usage, metrics, and the ledger look-up with
    which every request about one job starts.
``reads``
    The backend's reads: a job's status, spec, events, metrics, logs, checkpoints, pages.
``writes``
    What changes jobs: submissions (their parsing, the backend's ``submit`` and the ledger
    record) and cancels (the backend's ``request_cancel``, which does not wait for the end).
``ingest``
    One thread for the change feed into the ledger (:mod:`.ingest`), so a feed that stalls
    holds nothing else.

A lane runs at most ``workers`` calls at once and never queues more: a call that finds every
worker busy waits up to :data:`WAIT` seconds for one, then is refused with :class:`Busy`, a
503 BackendUnavailable with ``Retry-After`` (the client may try again; nothing was done).
A stalled call keeps its worker until it returns (a thread cannot be stopped), which the
backends bound: every Kubernetes call has a timeout (``api.kubernetes.apiTimeout``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from aviflow.errors import BackendUnavailable

T = TypeVar("T")
# Workers per lane: a request holds one only while its call blocks (milliseconds, unless the
# backend or the database stalls)
LEDGER_WORKERS = 8
READ_WORKERS = 8
WRITE_WORKERS = 4
WAIT = 2.0  # seconds a call waits for a worker of its lane before a 503
RETRY_AFTER = 5  # seconds, in the 503's Retry-After


class Busy(BackendUnavailable):
    """Every worker of a lane is busy (on the wire: BackendUnavailable, 503, Retry-After)."""

    retry_after: ClassVar[int] = RETRY_AFTER


class Lane:
    """``workers`` threads for one kind of call; see the module docstring."""

    def __init__(self, name: str, workers: int, what: str, wait: float = WAIT) -> None:
        self.name = name
        self.workers = workers
        self.what = what  # "reading jobs from the backend": for the 503's message
        self.wait = wait
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=f"aviflow-api-{name}"
        )
        self._free: asyncio.Semaphore | None = None  # made on the event loop, when first used
        self.busy = 0  # calls running now

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of this lane's threads (Busy when none is free in time)."""
        loop = asyncio.get_running_loop()
        if self._free is None:
            self._free = asyncio.Semaphore(self.workers)
        free = self._free
        try:
            await asyncio.wait_for(free.acquire(), self.wait)
        except TimeoutError:
            raise Busy(
                f"aviflow-api is busy {self.what}: all {self.workers} of its workers for that "
                f"are still in earlier calls, none was free within {self.wait:g} s; try again "
                f"in {RETRY_AFTER} s"
            ) from None
        self.busy += 1

        def release(_: object) -> None:  # when the thread is done, not when the caller gives up
            def free_one() -> None:
                self.busy -= 1
                free.release()

            try:
                loop.call_soon_threadsafe(free_one)
            except RuntimeError:  # the loop has closed: the service is stopping
                pass

        try:
            future = self._pool.submit(fn, *args)
        except BaseException:
            self.busy -= 1
            free.release()
            raise
        future.add_done_callback(release)
        return await asyncio.wrap_future(future)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Lanes:
    """aviflow-api's four lanes (see the module docstring)."""

    def __init__(self) -> None:
        self.ledger = Lane("ledger", LEDGER_WORKERS, "reading the ledger")
        self.reads = Lane("reads", READ_WORKERS, "reading jobs from the backend")
        self.writes = Lane("writes", WRITE_WORKERS, "submitting or cancelling jobs")
        self.ingest = Lane("ingest", 1, "following the change feed")

    def close(self) -> None:
        for lane in (self.ledger, self.reads, self.writes, self.ingest):
            lane.close()
