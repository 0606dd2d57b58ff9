"""What the server extension reads, for every browser tab of this notebook server.

One backend (:func:`aviflow.backends.get_backend`: aviflow-api with this server's hub token
inside a hub, the local backend without one), read in a small thread pool so a slow backend
never blocks the server's event loop. The job list is re-read at most once a second however
many tabs poll, and handed out as changes (:class:`~aviflow_jupyter.feed.JobFeed`); a job's
view is read through the panel's own incremental reader
(:class:`~aviflow.views.snapshot.SnapshotReader`), kept per job for the jobs viewed last.
"""

from __future__ import annotations

import asyncio
import getpass
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from aviflow.backends import get_backend
from aviflow.backends.base import Backend
from aviflow.backends.hub import USER_ENV
from aviflow.errors import AviflowError, BackendError, JobNotFound
from aviflow.views.sections import sections_html, snapshot_dict
from aviflow.views.snapshot import SnapshotReaders
from aviflow_jupyter.feed import Changes, JobFeed

T = TypeVar("T")
LIST_LIMIT = 200  # newest jobs in the sidebar
REFRESH_EVERY = 1.0  # seconds: the list is read at most this often, however many tabs poll
READERS_KEPT = 16  # job views kept warm (their cursors into events and metrics)


def current_user() -> str:
    """The user this server belongs to: the hub's user, or this OS user."""
    return os.environ.get(USER_ENV) or getpass.getuser()


class JobReads:
    def __init__(
        self,
        backend: Callable[[], Backend] = get_backend,
        user: str | None = None,
        limit: int = LIST_LIMIT,
        refresh_every: float = REFRESH_EVERY,
    ) -> None:
        self._make_backend = backend
        self._backend: Backend | None = None
        self.user = user or current_user()
        self.limit = limit
        self.refresh_every = refresh_every
        self.feed = JobFeed()
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="aviflow-reads")
        self._list_lock = asyncio.Lock()
        self._listed_at = 0.0
        self._listed_error: AviflowError | None = None
        self._readers = SnapshotReaders(READERS_KEPT)

    # -- plumbing --------------------------------------------------------------------------------
    @property
    def backend(self) -> Backend:
        if self._backend is None:
            try:
                self._backend = self._make_backend()
            except AviflowError:
                raise
            except Exception as exc:  # a misconfigured environment: say what, keep serving
                raise BackendError(f"cannot set up the Aviflow backend: {exc}") from None
        return self._backend

    @property
    def backend_name(self) -> str:
        try:
            return self.backend.name
        except AviflowError:
            return "unknown"

    async def _run(self, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, lambda: fn(*args, **kw))

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- the job list ----------------------------------------------------------------------------
    def _mine(self) -> list[dict[str, Any]]:
        # aviflow-api lists what the token may see (a team admin: the team's jobs); the local
        # backend, everyone's in its run store. The sidebar shows the caller's own newest:
        # asked for by user, so other people's newer jobs never push them out of the list.
        found = self.backend.summaries(self.limit, user=self.user)
        return [s.to_dict() for s in found if s.user == self.user]

    async def jobs(self, since: int) -> Changes:
        async with self._list_lock:
            if time.monotonic() - self._listed_at >= self.refresh_every:
                try:
                    self.feed.update(await self._run(self._mine))
                    self._listed_error = None
                except AviflowError as exc:
                    self._listed_error = exc
                self._listed_at = time.monotonic()
            if self._listed_error is not None:
                raise self._listed_error
        return self.feed.since(since)

    async def queues(self) -> list[dict[str, Any]]:
        return [q.to_dict() for q in await self._run(lambda: self.backend.queues())]

    # -- one job ---------------------------------------------------------------------------------
    def _view(self, job_id: str) -> dict[str, Any]:
        self._check_mine(job_id)
        snap = self._readers.read(self.backend, job_id)
        return {"job": snapshot_dict(snap), "html": sections_html(snap)}

    def _check_mine(self, job_id: str) -> None:
        # a run store holds every user's jobs; aviflow-api (authorizes_reads) checks on its own
        if not self.backend.authorizes_reads and self.backend.meta(job_id).user != self.user:
            raise JobNotFound(f"no job {job_id!r} of {self.user}")

    async def job(self, job_id: str) -> dict[str, Any]:
        try:
            return await self._run(self._view, job_id)
        except AviflowError:
            self._readers.forget(job_id)
            raise

    async def log(
        self, job_id: str, rank: int, tail: int | None, offset: int | None
    ) -> dict[str, Any]:
        def read() -> dict[str, Any]:
            self._check_mine(job_id)
            return self.backend.log(job_id, rank, tail=tail, offset=offset).to_dict()

        return await self._run(read)

    async def cancel(self, job_id: str) -> dict[str, Any]:
        """Ask for the job's end (``request_cancel``: it does not wait, so no worker here
        waits on it); ``state`` is the job's now, and the job's view reads on until it ends."""

        def cancel() -> dict[str, Any]:
            self._check_mine(job_id)
            cancelled = self.backend.request_cancel(job_id, by=self.user)
            return {
                "id": job_id,
                "cancelled": cancelled,
                "state": self.backend.status(job_id).state.value,
            }

        result = await self._run(cancel)
        self._listed_at = 0.0  # the next list read shows it
        return result
