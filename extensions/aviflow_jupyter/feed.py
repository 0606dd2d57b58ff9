"""The caller's job list as a feed of changes (pure): each read of the backend's summaries is
compared with the previous one, changed jobs get a new version, and a client asks for what
changed after the cursor it holds, so the browser receives only what changed.

Cursors are versions of this process's feed; they start at the process's start time in
milliseconds, so a cursor from an earlier server process is told apart (``reset``: the answer
is the whole list and the client replaces its own).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Changes:
    jobs: list[dict[str, Any]]  # newest first
    removed: list[str]
    next: int
    reset: bool


MAX_REMOVED = 1000  # removals remembered; a client older than the oldest forgotten one resets


@dataclass
class JobFeed:
    base: int = field(default_factory=lambda: int(time.time() * 1000))
    _version: int = 0
    _jobs: dict[str, tuple[int, dict[str, Any]]] = field(default_factory=dict)
    _removed: dict[str, int] = field(default_factory=dict)
    _order: list[str] = field(default_factory=list)
    _forgotten: int = 0  # the newest version of a removal no longer remembered

    @property
    def cursor(self) -> int:
        return self.base + self._version

    def update(self, summaries: Iterable[dict[str, Any]]) -> None:
        """Take the current list (newest first); changed or new jobs get a new version, jobs
        no longer listed are recorded as removed."""
        current: dict[str, dict[str, Any]] = {}
        order: list[str] = []
        for s in summaries:
            job_id = str(s["id"])
            if job_id not in current:
                current[job_id] = s
                order.append(job_id)
        for job_id, summary in current.items():
            known = self._jobs.get(job_id)
            if known is None or known[1] != summary:
                self._version += 1
                self._jobs[job_id] = (self.cursor, summary)
                self._removed.pop(job_id, None)
        for job_id in [j for j in self._jobs if j not in current]:
            del self._jobs[job_id]
            self._version += 1
            self._removed[job_id] = self.cursor
        self._order = order
        while len(self._removed) > MAX_REMOVED:
            oldest = min(self._removed, key=self._removed.__getitem__)
            self._forgotten = max(self._forgotten, self._removed.pop(oldest))

    def since(self, cursor: int) -> Changes:
        """What changed after ``cursor`` (0, or a cursor this feed never gave: everything)."""
        reset = not (max(self.base, self._forgotten) <= cursor <= self.cursor)
        jobs = [self._jobs[j][1] for j in self._order if reset or self._jobs[j][0] > cursor]
        removed = [] if reset else sorted(j for j, v in self._removed.items() if v > cursor)
        return Changes(jobs, removed, self.cursor, reset)
