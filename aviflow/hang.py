"""Hung attempts: when a running attempt counts as hung, and the failure it reports. Pure:
the reads and writes in a job's directory that feed these decisions (heartbeats, the
stacks, the declared hang, a full store) are :mod:`aviflow.driving`'s, which the local
supervisor and the Kubernetes controller call on each pass.

An attempt is hung when, for ``spec.hangTimeout``, a rank's watchdog has not beaten (its
process is frozen or stuck holding the GIL), or -- once the job has logged a step in this
attempt -- no step has been logged (every rank is alive but blocked, typically in a
collective waiting for a peer). Jobs that never log steps are judged by heartbeats only, and
ranks without a watchdog (commands) by nothing. The driver then asks every rank for its
Python stacks, waits a few seconds for them, and records a :class:`FailureInfo` naming the
silent ranks with their stacks; the lifecycle stops the attempt and restarts or fails it.

While the run store is full no judgment is made (:class:`aviflow.driving.Outages`).
"""

from __future__ import annotations

from collections.abc import Mapping

from aviflow._units import format_duration
from aviflow.records import FailureInfo

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
    attempt: int,
    ranks: list[int],
    why: str,
    stacks: Mapping[int, str],
    gpus_per_node: int,
    now: float,
) -> FailureInfo:
    """The failure a hung attempt reports at ``now``: the first silent rank, every silent
    rank's stacks."""
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
        time=now,
    )
