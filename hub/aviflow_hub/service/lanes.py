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
``queues``
    One thread for the backend's view of the queues (:mod:`.queue_reports`), likewise.

A lane runs at most ``workers`` calls at once and never queues more: a call that finds every
worker busy waits up to :data:`WAIT` seconds for one, then is refused with :class:`Busy`, a
503 BackendUnavailable with ``Retry-After`` (the client may try again; nothing was done).
A stalled call keeps its worker until it returns (a thread cannot be stopped), which the
backends bound: every Kubernetes call has a timeout (``api.kubernetes.apiTimeout``).

One caller (the hub user whose request the call serves, :data:`CALLER`, set by the request's
handler) holds at most half of a lane's workers at once; its next call waits for one of its
own to end, up to the same :data:`WAIT`, then is refused the same way. So one user's many
tabs, a script that hammers the API, or reads stuck on that user's jobs' files leave the
other half of every lane to everyone else.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, ClassVar, TypeVar

from aviflow.errors import BackendUnavailable

T = TypeVar("T")
# Workers per lane by default (``api.lanes`` sets them): a request holds one only while its
# call blocks (milliseconds, unless the backend or the database stalls)
LEDGER_WORKERS = 8
READ_WORKERS = 8
WRITE_WORKERS = 4
WAIT = 2.0  # seconds a call waits for a worker of its lane before a 503
RETRY_AFTER = 5  # seconds, in the 503's Retry-After
# the hub user whose request is being served (set by the handler; None: the service's own)
CALLER: ContextVar[str | None] = ContextVar("aviflow_api_caller", default=None)


class Busy(BackendUnavailable):
    """Every worker of a lane is busy (on the wire: BackendUnavailable, 503, Retry-After)."""

    retry_after: ClassVar[int] = RETRY_AFTER


class Lane:
    """``workers`` threads for one kind of call; see the module docstring."""

    def __init__(self, name: str, workers: int, what: str, wait: float = WAIT) -> None:
        self.name = name
        self.workers = workers
        self.per_caller = max(1, workers // 2)  # workers one caller may hold at once
        self.what = what  # "reading jobs from the backend": for the 503's message
        self.wait = wait
        # caller -> (its semaphore, its calls holding or waiting for it); gone when none
        self._callers: dict[str, tuple[asyncio.Semaphore, list[int]]] = {}
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=workers, thread_name_prefix=f"aviflow-api-{name}"
        )
        self._free: asyncio.Semaphore | None = None  # made on the event loop, when first used
        self.busy = 0  # calls running now

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of this lane's threads (Busy when none is free in time, or
        when the caller's share stays taken by its own earlier calls)."""
        loop = asyncio.get_running_loop()
        if self._free is None:
            self._free = asyncio.Semaphore(self.workers)
        free = self._free
        deadline = loop.time() + self.wait
        caller = CALLER.get()
        own = self._own(caller) if caller is not None else None
        held_own = held_free = False
        try:
            if own is not None:
                try:
                    await asyncio.wait_for(own.acquire(), self.wait)
                except TimeoutError:
                    raise Busy(
                        f"aviflow-api is busy {self.what} for {caller}: {self.per_caller} calls "
                        f"of yours are still running (one user may hold {self.per_caller} of "
                        f"its {self.workers} workers for that), none ended within "
                        f"{self.wait:g} s; try again in {RETRY_AFTER} s"
                    ) from None
                held_own = True
            try:  # what is left of the wait (a moment at least: a free worker is taken at once)
                await asyncio.wait_for(free.acquire(), max(0.05, deadline - loop.time()))
            except TimeoutError:
                raise Busy(
                    f"aviflow-api is busy {self.what}: all {self.workers} of its workers for "
                    f"that are still in earlier calls, none was free within {self.wait:g} s; "
                    f"try again in {RETRY_AFTER} s"
                ) from None
            held_free = True
            future = self._pool.submit(fn, *args)
        except BaseException:  # refused, the caller gave up, or the pool is closed
            if held_free:
                free.release()
            if held_own and own is not None:
                own.release()
            self._leave(caller)
            raise
        self.busy += 1

        def release(_: object) -> None:  # when the thread is done, not when the caller gives up
            def free_one() -> None:
                self.busy -= 1
                free.release()
                if own is not None:
                    own.release()
                    self._leave(caller)

            try:
                loop.call_soon_threadsafe(free_one)
            except RuntimeError:  # the loop has closed: the service is stopping
                pass

        future.add_done_callback(release)
        return await asyncio.wrap_future(future)

    def _own(self, caller: str) -> asyncio.Semaphore:
        entry = self._callers.setdefault(caller, (asyncio.Semaphore(self.per_caller), [0]))
        entry[1][0] += 1
        return entry[0]

    def _leave(self, caller: str | None) -> None:
        entry = self._callers.get(caller) if caller is not None else None
        if entry is not None:
            entry[1][0] -= 1
            if entry[1][0] <= 0:
                del self._callers[caller]  # type: ignore[arg-type]

    def callers(self) -> dict[str, int]:
        """Calls of each caller holding or waiting for a worker of this lane."""
        return {c: n[0] for c, (_, n) in self._callers.items()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class Lanes:
    """aviflow-api's four lanes (see the module docstring), sized by the admin's
    ``api.lanes`` (these defaults where not set)."""

    def __init__(
        self,
        ledger: int = LEDGER_WORKERS,
        reads: int = READ_WORKERS,
        writes: int = WRITE_WORKERS,
        wait: float = WAIT,
    ) -> None:
        self.ledger = Lane("ledger", ledger, "reading the ledger", wait)
        self.reads = Lane("reads", reads, "reading jobs from the backend", wait)
        self.writes = Lane("writes", writes, "submitting or cancelling jobs", wait)
        self.ingest = Lane("ingest", 1, "following the change feed", wait)
        self.queues = Lane("queues", 1, "reading the backend's queues", wait)

    def close(self) -> None:
        for lane in (self.ledger, self.reads, self.writes, self.ingest, self.queues):
            lane.close()
