"""A running job's pace toward the number of steps it declared, from its own metric rows.

A job declares how many steps it will take by logging ``total_steps`` among its metric
values (``aviflow.tracking.log({"loss": ..., "total_steps": 1000}, step)``, or
``accelerator.log`` through Aviflow's tracker); its rows' steps and times then say how fast
it goes. :class:`PaceCache` reads each running job's ``metrics.jsonl`` as it grows (a file
it sees for the first time, or one that grew by more than :data:`TAIL` bytes since, from its
last :data:`TAIL` bytes only: a pace needs two rows, not the history) and keeps, for the
job's current attempt, its first and last rows seen and the total last declared. The
estimates (:func:`aviflow.windows.release_window`) turn that into when the job releases its
GPUs: the steps left at that pace.

Everything here comes from the job, so it is untrusted: a row is used only when its
``attempt`` is the one running, its time lies between that attempt's admission and now, and
its step is not below the last one kept (a step that goes back starts the pace again); a
total must be a whole number above the step reached. A job can still lie about its pace,
which moves only the estimates of the jobs behind it, and never past its time limit (the
window's cap): the estimate is advice, and Kueue still decides.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aviflow.attempts import held_seconds
from aviflow.errors import UnsafeJobFile
from aviflow.records import Event, EventType
from aviflow.store import RunDir
from aviflow.store._data import metric_row
from aviflow.store._files import open_beneath, read_records
from aviflow.windows import Share, release_window

TOTAL_KEY = "total_steps"
TAIL = 256 << 10  # bytes of a metrics file read at most per look
MAX_TOTAL = 1 << 53
MAX_JOBS = 4096
SKEW = 1.0  # seconds a row's time may lie outside its attempt (clocks of other machines)


@dataclass(frozen=True)
class Pace:
    """What one attempt's rows said: ``first`` and ``last`` as ``(step, time)``."""

    attempt: int
    first: tuple[int, float]
    last: tuple[int, float]
    total: int | None = None

    def progress(self) -> tuple[int, int, float] | None:
        """``(steps done, steps in all, seconds)`` counted from the first row seen, as
        :func:`~aviflow.windows.release_window` takes it; None without a declared total
        ahead of the last step, or without two rows apart in steps and time.

        >>> Pace(1, (10, 100.0), (30, 120.0), 110).progress()
        (20, 100, 20.0)
        >>> Pace(1, (10, 100.0), (10, 120.0), 110).progress() is None
        True
        """
        (s0, t0), (s1, t1) = self.first, self.last
        if self.total is None or not s0 < s1 < self.total or t1 <= t0:
            return None
        return s1 - s0, self.total - s0, t1 - t0


def _total(values: dict[str, Any]) -> int | None:
    v = values.get(TOTAL_KEY)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    if v != v or not 0 < v <= MAX_TOTAL or int(v) != v:
        return None
    return int(v)


def fold(
    pace: Pace | None, rows: list[tuple[int, float, int, int | None]], attempt: int,
    admitted: float, now: float,
) -> Pace | None:  # fmt: skip
    """``pace`` carried over ``rows`` (``(step, time, attempt, total)``) of ``attempt``,
    admitted at ``admitted``; see the module docstring for what is believed.

    >>> p = fold(None, [(5, 10.0, 1, 100), (6, 11.0, 1, None)], 1, 9.0, 20.0)
    >>> p.first, p.last, p.total
    ((5, 10.0), (6, 11.0), 100)
    >>> fold(p, [(7, 30.0, 1, None)], 1, 9.0, 20.0) == p  # from the future: not believed
    True
    >>> fold(p, [(2, 12.0, 1, None)], 1, 9.0, 20.0).first  # the step went back
    (2, 12.0)
    >>> fold(p, [(9, 12.0, 2, None)], 2, 11.5, 20.0)  # another attempt starts afresh
    Pace(attempt=2, first=(9, 12.0), last=(9, 12.0), total=None)
    """
    if pace is not None and pace.attempt != attempt:
        pace = None
    for step, when, row_attempt, total in rows:
        if row_attempt != attempt or not admitted - SKEW <= when <= now + SKEW:
            continue
        if pace is None or step < pace.last[0] or when < pace.last[1]:
            pace = Pace(attempt, (step, when), (step, when), total)
        else:
            pace = Pace(attempt, pace.first, (step, when), total or pace.total)
    return pace


@dataclass
class _Seen:
    inode: int
    cursor: int
    pace: Pace | None


def _parse(obj: dict[str, Any]) -> tuple[int, float, int, int | None] | None:
    row = metric_row(obj)
    if row is None:
        return None
    return row.step, row.time, row.attempt, _total(row.values)


def current_start(events: Sequence[Event]) -> Event | None:
    """The ``STARTING`` event of the job's current attempt (its admission), if any."""
    return next((e for e in reversed(events) if e.type is EventType.STARTING), None)


class PaceCache:
    """Each running job's :class:`Pace`, its metrics read as they grow (see the module
    docstring). Safe to share between threads."""

    def __init__(self, jobs: int = MAX_JOBS) -> None:
        self.jobs = jobs
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, _Seen] = OrderedDict()

    def release(
        self,
        run: RunDir,
        events: Sequence[Event],
        time_limit: float | None,
        now: float,
        history: Sequence[float] = (),
        shares: Sequence[Share] = (),
        tail: tuple[float, float] = (0.0, 0.0),
    ) -> tuple[tuple[float, float], str]:
        """When the job holding GPUs with ``events`` releases them, and why
        (:func:`~aviflow.windows.release_window`): by its pace where its current attempt
        logged one, else by ``history`` (the seconds its cell's earlier runs held their
        GPUs: :class:`aviflow.history.CellHistory`), else by the part of its time limit the
        pool's recent runs held (``shares``: :meth:`aviflow.history.CellHistory.shares`),
        else by its time limit (what it has left of it); ``tail``: the seconds after a
        pace's last step (:meth:`aviflow.history.CellHistory.tail`)."""
        held = held_seconds(events, now)
        start = current_start(events)
        pace = self.of(run, start.attempt, start.time, now) if start is not None else None
        progress = pace.progress() if pace is not None else None
        return release_window(
            now, now - held, time_limit=time_limit, progress=progress,
            logged_at=pace.last[1] if pace is not None else None, history=history,
            shares=shares, tail=tail,
        )  # fmt: skip

    def of(self, run: RunDir, attempt: int, admitted: float, now: float) -> Pace | None:
        path = run.metrics_path
        try:  # its identity from a descriptor opened beneath the job's directory, as the read
            with open_beneath(path, run.path) as fd:
                st = os.fstat(fd)
        except (UnsafeJobFile, OSError):
            return None
        key = str(path)
        with self._lock:
            seen = self._seen.get(key)
        if seen is None or seen.inode != st.st_ino or st.st_size < seen.cursor:
            seen = _Seen(st.st_ino, max(0, st.st_size - TAIL), None)
        elif st.st_size - seen.cursor > TAIL:
            seen = _Seen(st.st_ino, st.st_size - TAIL, seen.pace)  # too far behind: its tail
        try:
            batch = read_records(path, _parse, seen.cursor, beneath=run.path, limit=TAIL + 1)
        except (UnsafeJobFile, OSError):
            return None
        pace = fold(seen.pace, batch.items, attempt, admitted, now)
        with self._lock:
            self._seen[key] = _Seen(seen.inode, batch.next, pace)
            self._seen.move_to_end(key)
            while len(self._seen) > self.jobs:
                self._seen.popitem(last=False)
        return pace
