"""Jobs' event logs, read once and then only as they grow (:class:`EventsCache`).

The controller reconciles a running job every second and forecasts the pool every queued
tick; a waiting local job's supervisor forecasts every few seconds. Each needs the whole
event log of the jobs it looks at, and an event log only grows
(:meth:`~aviflow.store.RunDir.append_events`). So the cache keeps each file's events with
the cursor after them and the file's identity when it was read (inode, size, mtime): an
unchanged file costs a ``stat``, one that grew is read from the cursor on, and one that
shrank below the cursor or was replaced (another inode) is read from its start again. A
file that is missing, or refused, reads as no events (as :meth:`RunDir.events` does).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass

from aviflow.paging import read_pages
from aviflow.records import Event
from aviflow.store._rundir import RunDir

MAX_JOBS = 4096  # event logs a cache keeps (the least recently read go first)
_Identity = tuple[int, int, int]  # inode, size, mtime in ns


@dataclass(frozen=True)
class _Read:
    identity: _Identity | None  # None: there was no file
    cursor: int
    events: tuple[Event, ...]


def _identity(run: RunDir) -> _Identity | None:
    try:
        st = os.lstat(run.events_path)  # the read itself opens it beneath the job's directory
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class EventsCache:
    """Each job's events as :meth:`RunDir.events` pages give them, read incrementally (see
    the module docstring); at most ``jobs`` logs kept. Safe to share between threads."""

    def __init__(self, jobs: int = MAX_JOBS) -> None:
        self.jobs = jobs
        self._lock = threading.Lock()
        self._reads: OrderedDict[str, _Read] = OrderedDict()

    def of(self, run: RunDir) -> tuple[Event, ...]:
        """The events of ``run``, in order."""
        path, now = str(run.events_path), _identity(run)
        with self._lock:
            had = self._reads.get(path)
        if had is not None and had.identity == now:
            found = had
        elif (
            had is not None
            and had.identity is not None
            and now is not None
            and now[0] == had.identity[0]
            and now[1] >= had.cursor
        ):
            more = read_pages(run.events, since=had.cursor)
            found = _Read(now, more.next, had.events + tuple(more.items))
        else:
            page = read_pages(run.events)
            found = _Read(now, page.next, tuple(page.items))
        with self._lock:
            self._reads[path] = found
            self._reads.move_to_end(path)
            while len(self._reads) > self.jobs:
                self._reads.popitem(last=False)
        return found.events
