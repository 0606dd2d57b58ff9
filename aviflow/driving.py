"""What a driver reads and writes in a job's directory about an attempt: one module for the
local supervisor and the Kubernetes controller, around the pure decisions of
:mod:`aviflow.hang` (when an attempt is hung) and :mod:`aviflow.failures` (who failed first).

- :func:`watch_hang`, on each pass over a running attempt: reads the ranks' heartbeats and
  the time of the last step, asks the ranks for their stacks when they are silent, and
  records the hang it declares (:meth:`RunDir.write_hang`), which is then the attempt's
  failure.
- :class:`Outages`: while the run store is full (:func:`aviflow.store.low_on_space`) a rank's
  heartbeats and metric rows cannot be written, so silence proves nothing: the judgment of
  the job's running attempt is suspended (said once), and resumes when the store takes bytes
  again, judging the attempt as if it had started running then (said once too): the ranks
  get a whole hang timeout to beat and to log a step (their rows waited in memory). No
  restart is burnt on a full disk.
- :func:`attempt_failure`, once an attempt ended: the failure it declared (a hang, pods that
  cannot start), else the root cause among its ranks' failure records, its nodes' launcher
  logs and exit codes. Where the logs come from is the driver's: the local supervisor reads
  its nodes' log files, the controller its pods' logs through the API server (never a file
  the job wrote).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from aviflow._units import format_duration
from aviflow.failures import attribute
from aviflow.hang import STACK_WAIT, hang_failure, silent_ranks
from aviflow.records import FailureInfo
from aviflow.store import RunDir, low_on_space

__all__ = ["Outages", "attempt_failure", "nothing_failed", "watch_hang"]


class Outages:
    """A driver's memory of full run stores, per job and attempt (see the module docstring);
    ``say`` is where it says that a judgment was suspended and resumed (the driver's log)."""

    def __init__(self, say: Callable[[str], None]) -> None:
        self.say = say
        self._full: dict[tuple[str, int], float] = {}  # since when the store is full
        self._resumed: dict[tuple[str, int], float] = {}  # when it took bytes again

    def judged_from(self, run: RunDir, attempt: int, timeout: float, now: float) -> float | None:
        """None while ``run``'s store is full (no judgment); else the time from which the
        attempt is judged (0.0: the store was not full within the last hang timeout)."""
        key = (run.id, attempt)
        if low_on_space(run.path):
            if key not in self._full:
                self._full[key] = now
                self.say(
                    f"job {run.id}: hang judgment of attempt {attempt} suspended: the run store "
                    "is full, so the ranks' heartbeats and steps cannot be written"
                )
            self._resumed.pop(key, None)
            return None
        since = self._full.pop(key, None)
        if since is not None:
            self._resumed[key] = now
            self.say(
                f"job {run.id}: hang judgment of attempt {attempt} resumes: the run store takes "
                f"bytes again after {now - since:.0f} s; the ranks have "
                f"{format_duration(timeout)} to beat and log a step"
            )
        resumed = self._resumed.get(key, 0.0)
        if resumed and now - resumed > timeout:
            del self._resumed[key]  # judged as before: a silence since then is a whole timeout
        return resumed


def watch_hang(
    run: RunDir,
    attempt: int,
    timeout: float,
    running_since: float,
    world: int,
    gpus_per_node: int,
    now: float | None = None,
    outages: Outages | None = None,
) -> FailureInfo | None:
    """One pass of a driver's hang check for a running attempt: the recorded hang (declared
    now or before), or None. Asks the ranks for their stacks first and waits for them up to
    :data:`~aviflow.hang.STACK_WAIT` seconds across passes. With ``outages``, no judgment
    while the run store is full, and a hang timeout's grace once it takes bytes again."""
    declared = run.hang(attempt)
    if declared is not None:
        return declared
    now = time.time() if now is None else now
    if outages is not None:
        since = outages.judged_from(run, attempt, timeout, now)
        if since is None:
            return None
        running_since = max(running_since, since)
    try:  # the metrics file grows with every step: its mtime is the last step's time
        last_step: float | None = run.metrics_path.stat().st_mtime
    except OSError:
        last_step = None
    if last_step is not None and last_step <= running_since:
        last_step = None  # no step in this attempt yet
    found = silent_ranks(
        now, timeout, running_since, run.rank_beats(attempt, world), last_step, world
    )
    if found is None:
        return None
    asked = run.stacks_requested(attempt)
    if asked is None:
        run.request_stacks(attempt, now)
        return None
    ranks, why = found
    stacks = run.stacks(attempt, world)
    if now - asked < STACK_WAIT and not all(r in stacks for r in ranks):
        return None
    record = hang_failure(attempt, ranks, why, stacks, gpus_per_node, now)
    run.write_hang(record)
    return record


def nothing_failed(run: RunDir, attempt: int, codes: Mapping[int, int | None]) -> bool:
    """Whether an attempt that ended has nothing to attribute: no failure declared, no rank's
    failure record, and every node exited 0 (or was still running when stopped)."""
    return (
        run.hang(attempt) is None
        and all(c in (None, 0) for c in codes.values())
        and not run.failures(attempt)
    )


def attempt_failure(
    run: RunDir,
    attempt: int,
    codes: Mapping[int, int | None],
    world: int,
    gpus_per_node: int,
    node_log: Callable[[int], str],
    rank_tail: Callable[[int], str],
) -> FailureInfo:
    """The failure of an attempt that ended with ``codes`` (node -> exit code, None: still
    running when stopped): the one the driver declared for it, else who failed first
    (:func:`aviflow.failures.attribute`) from the failure records of ranks the job has
    (``world``: a record naming another rank is the job's invention, left out), the end of
    each node's launcher log (``node_log(node)``) and, for a rank without a traceback, the
    end of its output (``rank_tail(rank)``)."""
    declared = run.hang(attempt)
    if declared is not None:
        return declared
    records = [r for r in run.failures(attempt) if r.rank is None or 0 <= r.rank < world]
    node_logs = {n: node_log(n) for n in codes}
    ranks = {r.rank for r in records if r.rank is not None}
    tails = {r: rank_tail(r) for r in ranks}
    return attribute(records, node_logs, codes, gpus_per_node, tails)
