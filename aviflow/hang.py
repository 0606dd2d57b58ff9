"""Hung attempts: when a running attempt counts as hung, and the failure it reports. Pure
decisions plus :func:`watch`, which a driver (the local supervisor, the Kubernetes
controller) calls on each pass.

An attempt is hung when, for ``spec.hangTimeout``, a rank's watchdog has not beaten (its
process is frozen or stuck holding the GIL), or -- once the job has logged a step in this
attempt -- no step has been logged (every rank is alive but blocked, typically in a
collective waiting for a peer). Jobs that never log steps are judged by heartbeats only, and
ranks without a watchdog (commands) by nothing. The driver then asks every rank for its
Python stacks, waits a few seconds for them, and records a :class:`FailureInfo` naming the
silent ranks with their stacks; the lifecycle stops the attempt and restarts or fails it.

While the run store is full (:func:`aviflow.store.low_on_space`) a rank's heartbeats and
metric rows cannot be written, so silence proves nothing: the driver's :class:`Outages`
suspends the judgment of the job's running attempt (said once), and resumes it when the store
takes bytes again, judging the attempt as if it had started running then (said once too):
the ranks get a whole hang timeout to beat and to log a step (their rows waited in memory).
No restart is burnt on a full disk.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from aviflow._units import format_duration
from aviflow.records import FailureInfo
from aviflow.store import RunDir, low_on_space

STACK_WAIT = 10.0  # seconds to wait for the ranks' stacks once asked
MAX_STACK_CHARS = 20_000


def silent_ranks(
    now: float,
    timeout: float,
    running_since: float,
    beats: Mapping[int, float],
    last_step: float | None,
    world: int,
) -> tuple[list[int], str] | None:
    """``(ranks, why)`` if the attempt running since ``running_since`` is hung, else None."""
    if now - running_since <= timeout:
        return None
    stale = sorted(r for r, t in beats.items() if now - max(t, running_since) > timeout)
    if stale:
        return stale, f"no heartbeat from rank(s) {stale} for {format_duration(timeout)}"
    if last_step is not None and now - max(last_step, running_since) > timeout:
        ranks = list(range(world))
        return ranks, f"no step logged for {format_duration(timeout)} (every rank alive)"
    return None


def hang_failure(
    attempt: int, ranks: list[int], why: str, stacks: Mapping[int, str], gpus_per_node: int
) -> FailureInfo:
    """The failure a hung attempt reports: the first silent rank, every silent rank's stacks."""
    shown = [f"--- rank {r} ---\n{stacks[r].strip()}" for r in ranks if r in stacks]
    missing = [r for r in ranks if r not in stacks]
    if missing:
        shown.append(f"(no stacks from rank(s) {missing})")
    text = "\n".join(shown)
    if len(text) > MAX_STACK_CHARS:
        text = text[: MAX_STACK_CHARS - 20] + "\n... (cut)"
    return FailureInfo(
        rank=ranks[0],
        node=ranks[0] // gpus_per_node,
        attempt=attempt,
        exception="Hang",
        message=why,
        traceback=text,
        time=time.time(),
    )


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


def watch(
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
    :data:`STACK_WAIT` seconds across passes. With ``outages``, no judgment while the run
    store is full, and a hang timeout's grace once it takes bytes again."""
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
    record = hang_failure(attempt, ranks, why, stacks, gpus_per_node)
    run.write_hang(record)
    return record
