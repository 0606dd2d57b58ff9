"""How long a cell's earlier runs held their GPUs: what a running job's release is timed by
when it declares no pace (:func:`aviflow.windows.release_window`'s ``history``).

A job submitted from a notebook cell records where it came from in its meta (``origin``,
the client's claim: the ``notebook``'s path and the ``cell_id``). The same user's earlier
runs of the same cell (the same notebook, the same non-empty cell id, submitted before it)
that ended SUCCEEDED say how long a full run of that cell takes; a run that failed or was
cancelled says nothing about it. :class:`CellHistory` gives, for a running job, the seconds
each of the newest :data:`RUNS` such runs held its GPUs (:func:`~aviflow.attempts.held_seconds`
over its events), looking only among the store's newest :data:`LOOK_BACK` jobs.

Both forecasts ask for every running job on every refresh (the controller's every 5 s, over
a store of thousands of jobs), so nothing is read twice that cannot have changed: a job's
meta (written once) is read once, a finished run's outcome once, the store's index once per
running job at most (a listing that already holds the job also holds every job submitted
before it, up to its bound); a job's answer is kept, and looked at again every
:data:`RECHECK` seconds only while an earlier run of its cell has not finished. A job with
no cell id costs the read of its own meta, once.

For jobs with no such runs, :meth:`CellHistory.shares` gives the part of their time limit
that the pool's newest :data:`SHARES` successful runs with one held their GPUs, with that
limit (:func:`aviflow.windows.run_window` takes those of the runs like the job's): counted
again at most every :data:`RECHECK` seconds, over the same listing, each job's time limit
read once and a finished run's outcome once.

The ``user`` and the events are the platform's; ``origin`` is the client's: its values are
compared as opaque strings of bounded length, never used as paths. A meta or an event log
that is missing, unreadable or too long leaves that run out, never fails the forecast.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Container, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from aviflow.attempts import finished_at, held_seconds
from aviflow.errors import AviflowError
from aviflow.pace import PaceCache, current_start
from aviflow.paging import read_pages
from aviflow.records import ORIGIN_CLAIM, Event, JobMeta, JobState
from aviflow.store import RunDir, RunStore
from aviflow.windows import Share, spread

RUNS = 5  # the newest successful earlier runs of a cell counted
SHARES = 50  # the pool's newest successful runs with a time limit whose shares are counted
LOOK_BACK = 1000  # the store's newest jobs looked among
RECHECK = 60.0  # seconds before an answer that waits on an unfinished run is looked at again
MAX_JOBS = 4096  # answers kept (the least recently asked go first)
MAX_PAGES = 16  # pages of events read of an earlier run at most (a longer log is left out)
_NOTEBOOK_CHARS = ORIGIN_CLAIM["notebook"][1]
_CELL_CHARS = ORIGIN_CLAIM["cell_id"][1]
T = TypeVar("T")


@dataclass(frozen=True)
class Cell:
    """Whose run of which cell a job is, and when it was submitted."""

    user: str
    notebook: str | None
    cell_id: str
    submitted: float

    def same(self, other: Cell) -> bool:
        return (self.user, self.notebook, self.cell_id) == (
            other.user,
            other.notebook,
            other.cell_id,
        )


def cell_of(meta: JobMeta) -> Cell | None:
    """The cell ``meta`` says its job came from (None: no cell id, or a value of the wrong
    type or length).

    >>> m = JobMeta("j", "t", "ada", 5.0, origin={"notebook": "a.ipynb", "cell_id": "c1"})
    >>> cell_of(m)
    Cell(user='ada', notebook='a.ipynb', cell_id='c1', submitted=5.0)
    >>> cell_of(JobMeta("j", "t", "ada", 5.0, origin={"notebook": "a.ipynb", "cell_id": ""}))
    """
    origin = meta.origin if isinstance(meta.origin, dict) else {}
    cell, notebook = origin.get("cell_id"), origin.get("notebook")
    if not isinstance(cell, str) or not 0 < len(cell) <= _CELL_CHARS:
        return None
    if notebook is not None and not (
        isinstance(notebook, str) and len(notebook) <= _NOTEBOOK_CHARS
    ):
        return None
    return Cell(meta.user, notebook, cell, meta.submitted)


def outcome(events: Sequence[Event]) -> float | Literal["open"] | None:
    """The seconds a run with ``events`` held its GPUs if it ended SUCCEEDED, None if it
    ended otherwise, ``"open"`` while it has not ended.

    >>> from aviflow.records import EventType as E
    >>> ran = [Event(E.QUEUED, 0, time=0.0), Event(E.STARTING, 1, time=5.0)]
    >>> outcome(ran), outcome([*ran, Event(E.SUCCEEDED, 1, time=305.0)])
    ('open', 300.0)
    >>> outcome([*ran, Event(E.FAILED, 1, time=305.0)]) is None
    True
    """
    last = next((e.type.state() for e in reversed(events) if e.type.state() is not None), None)
    end = finished_at(events)
    if last is None or end is None:
        return "open"
    return held_seconds(events, end) if last is JobState.SUCCEEDED else None


@dataclass
class _Answer:
    earlier: tuple[str, ...]  # the job's earlier runs of its cell, newest first
    at: float  # when the history was counted
    history: tuple[float, ...] = ()
    settled: bool = True  # no unfinished earlier run can change it


class CellHistory:
    """The held seconds of each running job's cell's earlier runs in ``store`` (see the
    module docstring). Safe to share between threads."""

    def __init__(
        self, store: RunStore, *, look_back: int = LOOK_BACK, jobs: int = MAX_JOBS
    ) -> None:
        self.store = store
        self.look_back = look_back
        self.jobs = jobs
        self._lock = threading.Lock()
        self._answers: OrderedDict[str, _Answer] = OrderedDict()
        self._cells: OrderedDict[str, Cell | None] = OrderedDict()
        self._ends: OrderedDict[str, float | None] = OrderedDict()  # finished: held if it succeeded
        self._listing: list[str] = []
        self._limits: OrderedDict[str, float | None] = OrderedDict()  # job id -> its limit
        self._shares: tuple[float, tuple[Share, ...]] = (-RECHECK, ())  # when, what
        self._tails: OrderedDict[str, float | None] = OrderedDict()  # job id -> its tail
        self._tail: tuple[float, float] = (0.0, 0.0)

    def of(self, run: RunDir, now: float) -> tuple[float, ...]:
        """The seconds the newest :data:`RUNS` successful earlier runs of ``run``'s cell held
        their GPUs, newest first (empty: no cell id, or no such run)."""
        with self._lock:
            answer = self._answers.get(run.id)
            if answer is None:
                earlier = self._earlier(run)
                answer = _Answer(earlier, now, *self._count(earlier))
            elif not answer.settled and now - answer.at >= RECHECK:
                answer = _Answer(answer.earlier, now, *self._count(answer.earlier))
            self._answers[run.id] = answer
            self._answers.move_to_end(run.id)
            _trim(self._answers, self.jobs)
            return answer.history

    def shares(self, now: float, live: Container[str] = ()) -> tuple[Share, ...]:
        """The part of its time limit each of the store's newest :data:`SHARES` successful
        runs with a time limit held its GPUs (0-1), with that limit in seconds, newest
        first, among its newest ``look_back`` jobs; counted again at most every
        :data:`RECHECK` seconds. ``live``: the jobs the caller knows are queued or running
        (not ended: their logs are not read)."""
        with self._lock:
            at, found = self._shares
            if now - at < RECHECK:
                return found
            try:
                self._listing = self.store.ids(newest=self.look_back)
            except (AviflowError, OSError, ValueError):
                self._listing = []
            counted: list[Share] = []
            tails: list[float] = []
            for job_id in reversed(self._listing):
                if len(counted) == SHARES:
                    break
                if job_id in live:
                    continue
                limit = self._limit(job_id)
                if limit is None:
                    continue
                held = self._end(job_id)
                if not isinstance(held, str) and held is not None and held > 0:
                    counted.append((min(1.0, held / limit), limit))
                    if (tail := self._tail_of(job_id)) is not None:
                        tails.append(tail)
            self._shares = (now, tuple(counted))
            self._tail = spread(tails)
            return self._shares[1]

    def tail(self) -> tuple[float, float]:
        """How long the pool's newest successful runs that logged metric rows held their
        GPUs after their last row (pods exiting, the Job completing, the quota freed), 10th
        and 90th percentile (:func:`aviflow.windows.spread`), as the last :meth:`shares`
        counted them: what a pace cannot see."""
        with self._lock:
            return self._tail

    def _tail_of(self, job_id: str) -> float | None:
        """Seconds from a successful run's last metric row of its final attempt to its end
        (None: no row, or unreadable); kept. The row is the job's (untrusted): only one
        within that attempt counts (:func:`aviflow.pace.fold`), so it lies within the
        seconds the run held."""
        if job_id in self._tails:
            self._tails.move_to_end(job_id)
            return self._tails[job_id]
        tail = None
        try:
            run = self.store.get(job_id)
            page = read_pages(run.events, pages=MAX_PAGES)
            end, start = finished_at(page.items), current_start(page.items)
            if end is not None and start is not None:
                pace = PaceCache(jobs=1).of(run, start.attempt, start.time, end)
                tail = None if pace is None else max(0.0, end - pace.last[1])
        except (AviflowError, OSError, ValueError):
            tail = None
        self._tails[job_id] = tail
        _trim(self._tails, 4 * self.look_back)
        return tail

    def _limit(self, job_id: str) -> float | None:
        """The job's time limit in seconds (None: none, or its spec cannot be read); kept."""
        if job_id in self._limits:
            self._limits.move_to_end(job_id)
            return self._limits[job_id]
        try:
            seconds = self.store.get(job_id).spec().spec.time_limit_seconds
        except (AviflowError, OSError, ValueError):
            seconds = None
        limit = float(seconds) if seconds else None
        self._limits[job_id] = limit
        _trim(self._limits, 4 * self.look_back)
        return limit

    def _earlier(self, run: RunDir) -> tuple[str, ...]:
        """The ids of the same user's runs of ``run``'s cell submitted before it, newest
        first, among the store's newest jobs."""
        mine = self._cell(run.id, run)
        if mine is None:
            return ()
        if run.id not in self._listing:
            try:
                self._listing = self.store.ids(newest=self.look_back)
            except (AviflowError, OSError, ValueError):
                self._listing = []
        found = []
        for job_id in reversed(self._listing):
            if job_id == run.id:
                continue
            cell = self._cell(job_id)
            if cell is not None and cell.same(mine) and cell.submitted < mine.submitted:
                found.append(job_id)
        return tuple(found)

    def _count(self, earlier: tuple[str, ...]) -> tuple[tuple[float, ...], bool]:
        """The history from ``earlier`` (newest first), and whether it is settled."""
        found: list[float] = []
        settled = True
        for job_id in earlier:
            if len(found) == RUNS:
                break  # an older run cannot displace these
            held = self._end(job_id)
            if isinstance(held, str):
                settled = False  # not ended yet
            elif held is not None and held > 0:  # a run that held nothing says nothing
                found.append(float(held))
        return tuple(found), settled

    def _cell(self, job_id: str, run: RunDir | None = None) -> Cell | None:
        if job_id in self._cells:
            self._cells.move_to_end(job_id)
            return self._cells[job_id]
        try:
            cell = cell_of((run or self.store.get(job_id)).meta())
        except (AviflowError, OSError, ValueError):
            cell = None  # gone or unreadable: not a run of any cell
        self._cells[job_id] = cell
        _trim(self._cells, 4 * self.look_back)
        return cell

    def _end(self, job_id: str) -> float | Literal["open"] | None:
        """The run's :func:`outcome` (None where it cannot be read); a finished one's is
        kept."""
        if job_id in self._ends:
            self._ends.move_to_end(job_id)
            return self._ends[job_id]
        try:
            page = read_pages(self.store.get(job_id).events, pages=MAX_PAGES)
        except (AviflowError, OSError, ValueError):
            page = None
        held = None if page is None or page.more else outcome(page.items)
        if held == "open":
            return "open"  # not kept: looked at again at the next recheck
        self._ends[job_id] = held
        _trim(self._ends, 4 * self.look_back)
        return held


def _trim(cache: OrderedDict[str, T], size: int) -> None:
    while len(cache) > size:
        cache.popitem(last=False)
