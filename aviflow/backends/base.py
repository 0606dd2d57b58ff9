"""The backend interface: every method a backend may implement, declared with its default.

A backend turns a validated :class:`~aviflow.spec.TrainJob` plus its code bundle into a
running job and answers questions about it, in typed records
(:mod:`aviflow.records`). As with JupyterHub's ``Spawner``, the base class documents the
whole set:

Required (abstract)
    ``submit(job, bundle, owner, job_id=) -> id``, ``status(id) -> JobStatus`` (a plain read: it never
    changes anything), ``cancel(id) -> bool``, ``list_ids()``, and the reads ``spec``,
    ``meta``, ``events(id, since=, limit=)``, ``metrics(id, since=, after_step=, limit=)``,
    ``ranks``, ``log(id, rank, tail=|offset=)``, ``checkpoints``, ``failures``. Backends
    with a run store get the reads from :class:`~aviflow.backends._store.StoreReads`.
Declared by each class (defaults here)
    ``name`` (its entry-point name, recorded on each job it submits); ``settings_model``
    (the model of its config section, the hub config's ``api.<name>``, which validates that
    section when the config loads; None: it takes none); its capabilities, which callers ask
    instead of testing its name: ``reports_borrowing`` (:meth:`queues` knows what a queue
    borrows from its cohort) and ``authorizes_reads`` (it shows each caller only the jobs the
    caller may see, as aviflow-api does; without it every job of its store is readable to its
    reader, who checks owners).
Optional (defaults here)
    ``from_config(section)`` (build from one config section),
    ``config_section(settings, run_root=, quotas=)`` (the section a service that runs the
    backend for its users, aviflow-api, builds it from), ``start()`` / ``stop()`` (a
    backend-owned controller or watcher),
    ``reconcile(ids)`` (record what only the backend can notice, e.g. a dead supervisor),
    ``request_cancel(id)`` (ask for the end and return at once; default: ``cancel``),
    ``summaries(limit)`` (one record per job for list views), ``quota(queue)`` and
    ``queues()``, ``images()`` (the trainer images ``--image`` may pick, the first being
    the default), ``render(job)`` (the manifests or argv it would create),
    ``checkpoint_path(ref)`` (where a checkpoint is on this machine), ``changes(done)``
    (the change feed the hub's ledger follows).

Incremental reads take the cursor the previous read returned (``Batch.next``,
``LogChunk.next``), so a reader pays for what changed, not for the job's history. Events and
metrics come in pages: at most ``limit`` records (default :data:`~aviflow.paging.PAGE_ROWS`,
at most :data:`~aviflow.paging.MAX_PAGE_ROWS`) and :data:`~aviflow.paging.PAGE_BYTES` of
them as JSON; a page's ``more`` says to read again from its ``next`` at once
(:func:`~aviflow.paging.read_pages` follows them), so no answer grows with the job's history.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from aviflow.attempts import summarize
from aviflow.bundle import CodeBundle
from aviflow.errors import AviflowError, BackendError
from aviflow.estimate import Estimate
from aviflow.paging import MAX_PAGE_ROWS, Batch, read_pages
from aviflow.records import (
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobStatus,
    JobSummary,
    LogChunk,
    MetricRow,
    Owner,
    QueueQuota,
    TrainerImage,
)
from aviflow.spec import TrainJob

if TYPE_CHECKING:
    from aviflow.backends._feed import ChangeFeed


class Backend(ABC):
    """Base class of job backends; see the module docstring for the contract."""

    name: ClassVar[str]
    # the model of its config section (the hub config's api.<name>): it validates the section
    # when the config loads; None: the backend takes no settings there
    settings_model: ClassVar[type[BaseModel] | None] = None
    # queues() reports GPUs a queue borrows from its cohort (Kueue's view), which no ledger of
    # the jobs can tell: aviflow-api then reads them in the background (default: no cohorts)
    reports_borrowing: ClassVar[bool] = False
    # it shows each caller only the jobs the caller may see (aviflow-api decides by the
    # caller's token); without it, a reader serving one user checks each job's owner itself
    authorizes_reads: ClassVar[bool] = False

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None = None) -> Backend:
        """A backend built from its configuration section (keys are constructor arguments)."""
        try:
            return cls(**dict(section or {}))
        except TypeError as exc:
            raise BackendError(f"bad settings for the {cls.name!r} backend: {exc}") from None

    @classmethod
    def config_section(
        cls, settings: BaseModel | None, *, run_root: Path, quotas: Mapping[str, int]
    ) -> dict[str, Any]:
        """The section :meth:`from_config` takes in a service that runs this backend for its
        users (aviflow-api): ``settings`` (a :attr:`settings_model` the config validated, or
        None) plus what the service decides, for a backend that uses it: ``run_root``, the run
        store its notebooks mount, and ``quotas``, each queue's GPU quota. Default: the keys
        the admin set in ``settings``; the service's choices unused."""
        if settings is None:
            return {}
        return settings.model_dump(by_alias=True, exclude_unset=True)

    def start(self) -> None:
        """Start what this backend runs in the background (default: nothing)."""
        return None

    def stop(self) -> None:
        """Stop what :meth:`start` started (default: nothing)."""
        return None

    # -- required --------------------------------------------------------------------------------
    @abstractmethod
    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        """Record and start (or queue) the job for ``owner`` (default: this process's user);
        return its id. Raise before writing anything when the job can never run here.

        ``job_id``: the id the caller chose (:func:`aviflow.store.new_job_id`), so that a
        retry cannot make a second job: submitting again with the id of a job the same
        owner submitted before completes that submission if it had not completed, and
        returns the id. A backend that chooses ids itself refuses one (BackendError)."""

    @abstractmethod
    def status(self, job_id: str) -> JobStatus:
        """The job's status. A plain read: nothing is written or reconciled."""

    @abstractmethod
    def cancel(self, job_id: str, by: str | None = None) -> bool:
        """Stop the job and every process or object it has, and return once it has ended;
        False if it had already finished. ``by``: who asked (recorded on the ``CANCELLED``
        event; default: this OS user)."""

    @abstractmethod
    def list_ids(self, newest: int | None = None) -> list[str]:
        """Ids of the jobs this backend knows, oldest first (only the newest N if given)."""

    @abstractmethod
    def spec(self, job_id: str) -> TrainJob: ...

    @abstractmethod
    def meta(self, job_id: str) -> JobMeta: ...

    @abstractmethod
    def events(self, job_id: str, since: int = 0, limit: int | None = None) -> Batch[Event]:
        """One page of events after cursor ``since`` (0: from the first), the cursor to
        continue from, and whether more follow it (see the module docstring)."""

    @abstractmethod
    def metrics(
        self,
        job_id: str,
        since: int = 0,
        after_step: int | None = None,
        limit: int | None = None,
    ) -> Batch[MetricRow]:
        """One page of metric rows after cursor ``since``, only those past ``after_step`` if
        given (the page counts only those)."""

    @abstractmethod
    def ranks(self, job_id: str) -> list[int]:
        """Ranks that have a log."""

    @abstractmethod
    def log(
        self, job_id: str, rank: int, *, tail: int | None = None, offset: int | None = None
    ) -> LogChunk:
        """Rank ``rank``'s log: the last ``tail`` lines, or from byte ``offset`` on."""

    @abstractmethod
    def checkpoints(self, job_id: str) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first."""

    @abstractmethod
    def failures(self, job_id: str) -> list[FailureInfo]:
        """Failure records of ranks that raised, earliest first."""

    # -- optional --------------------------------------------------------------------------------
    def request_cancel(self, job_id: str, by: str | None = None) -> bool:
        """Ask for the job to be stopped and return without waiting for its end (a server
        must not hold a worker for it); the job's status follows, ``CANCELLED`` once it has
        stopped. False if it had already finished. Default: :meth:`cancel`, which waits."""
        return self.cancel(job_id, by)

    def reconcile(self, job_ids: Iterable[str] | None = None) -> list[str]:
        """Record what only this backend can notice (default: nothing); the ids it changed."""
        return []

    def summaries(self, limit: int | None = None, user: str | None = None) -> list[JobSummary]:
        """One summary per job, newest first (at most ``limit``; only ``user``'s jobs if
        given). Jobs that cannot be read are left out, so one broken job never breaks a
        listing."""
        few = limit is not None and user is None
        ids = list(reversed(self.list_ids(limit + 16 if few and limit is not None else None)))
        out: list[JobSummary] = []
        now = time.time()
        for job_id in ids:
            if limit is not None and len(out) >= limit:
                break
            try:
                if user is not None and self.meta(job_id).user != user:
                    continue
                out.append(
                    summarize(
                        self.meta(job_id),
                        self.spec(job_id),
                        self.status(job_id),
                        self._all_events(job_id),
                        now,
                    )
                )
            except (AviflowError, OSError, ValueError, KeyError):
                continue
        return out

    def _all_events(self, job_id: str) -> list[Event]:
        return read_pages(lambda at: self.events(job_id, at, MAX_PAGE_ROWS)).items

    def quota(self, queue: str) -> QueueQuota | None:
        """The queue's GPU quota and use, if this backend knows them (default: None)."""
        return None

    def queues(self) -> list[QueueQuota]:
        """Every queue with a quota this backend knows (default: none)."""
        return []

    def forecast(self, job: TrainJob) -> Estimate | None:
        """When ``job`` would start if it were submitted now, behind the jobs waiting in its
        queue (see :mod:`aviflow.estimate`); creates nothing. None: this backend cannot tell
        (the default)."""
        return None

    def images(self) -> list[TrainerImage]:
        """The trainer images jobs may run in, the default first (default: none known).
        ``submit`` records the one a job runs in as ``JobMeta.image``."""
        return []

    def render(self, job: TrainJob) -> list[dict[str, Any]] | None:
        """The objects (or argv) submitting ``job`` would create, if the backend can tell."""
        return None

    def checkpoint_path(self, ref: CheckpointRef) -> Path:
        """Where ``ref`` is on this machine (for ``accelerator.load_state``)."""
        raise BackendError(
            f"checkpoints of the {self.name!r} backend are not readable on this machine"
        )

    def changes(self, done: Iterable[str] = ()) -> ChangeFeed:
        """A feed of what changes in this backend's jobs (``done``: ids already final to the
        reader, never read again). Default: polls the reads above."""
        from aviflow.backends._feed import PollingFeed

        return PollingFeed(self, done)
