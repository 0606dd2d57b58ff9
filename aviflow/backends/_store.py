"""``StoreReads``: the read half of the backend contract, over a run store.

A backend whose jobs live in a :class:`~aviflow.store.RunStore` it can read (the local
backend; the Kubernetes backend, which mounts the shared store) mixes this in and only
implements ``submit``, ``status`` and ``cancel``.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from aviflow.errors import BackendError, RequestError
from aviflow.paging import MAX_PAGE_ROWS, PAGE_BYTES, PAGE_ROWS, Batch
from aviflow.records import CheckpointRef, Event, FailureInfo, JobMeta, LogChunk, MetricRow, Owner
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore


def _rows(limit: int | None) -> int:
    """Records in a page: ``limit`` within 1 and MAX_PAGE_ROWS, PAGE_ROWS when not given."""
    return PAGE_ROWS if limit is None else min(max(int(limit), 1), MAX_PAGE_ROWS)


class StoreReads:
    """Reads of :class:`~aviflow.backends.base.Backend` through ``self.store``."""

    store: RunStore
    name: ClassVar[str]

    def run_dir(self, job_id: str) -> RunDir:
        """The job's run-store directory (raises JobNotFound)."""
        return self.store.get(job_id)

    def list_ids(self, newest: int | None = None) -> list[str]:
        return self.store.ids(newest)

    def submitted_before(self, job_id: str, owner: Owner) -> RunDir | None:
        """The directory of job ``job_id`` if ``owner`` submitted it to this backend before
        (a retried submission), None if there is none; another's is a BackendError."""
        path = self.store.locate(self.store.check_id(job_id))
        if path is None:
            return None
        run = RunDir(path)
        meta = run.meta()
        if (meta.user, meta.backend) != (owner.user, self.name):
            raise BackendError(f"job id {job_id!r} is another job's: submit without it")
        return run

    def spec(self, job_id: str) -> TrainJob:
        return self.run_dir(job_id).spec()

    def meta(self, job_id: str) -> JobMeta:
        return self.run_dir(job_id).meta()

    def events(self, job_id: str, since: int = 0, limit: int | None = None) -> Batch[Event]:
        return self.run_dir(job_id).events(since, rows=_rows(limit), budget=PAGE_BYTES)

    def metrics(
        self,
        job_id: str,
        since: int = 0,
        after_step: int | None = None,
        limit: int | None = None,
    ) -> Batch[MetricRow]:
        return self.run_dir(job_id).metrics(
            since, after_step=after_step, rows=_rows(limit), budget=PAGE_BYTES
        )

    def ranks(self, job_id: str) -> list[int]:
        run = self.run_dir(job_id)
        return run.ranks(run.spec().spec.total_gpus)

    def log(
        self, job_id: str, rank: int, *, tail: int | None = None, offset: int | None = None
    ) -> LogChunk:
        """Rank ``rank``'s log; a rank the job does not have is a RequestError (400), and so
        is a log the job made a symlink or a special file (UnsafeJobFile)."""
        run = self.run_dir(job_id)
        world = run.spec().spec.total_gpus
        if not 0 <= rank < world:
            has = "rank 0 only" if world == 1 else f"ranks 0 to {world - 1}"
            raise RequestError(f"job {job_id!r} has no rank {rank}: it has {has}")
        return run.log(rank, tail=tail, offset=offset)

    def checkpoints(self, job_id: str) -> list[CheckpointRef]:
        return self.run_dir(job_id).checkpoints()

    def failures(self, job_id: str) -> list[FailureInfo]:
        return self.run_dir(job_id).failures()

    def checkpoint_path(self, ref: CheckpointRef) -> Path:
        return self.store.checkpoint_path(ref)
