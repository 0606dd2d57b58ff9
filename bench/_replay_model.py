"""An ideal queue model of ``bench/replay.py``'s two configurations (pure; no cluster): the
same replayed jobs admitted the moment quota allows, with no start-up, no release delay and no
whole-second clock, so the scan it prints is what the trace slice itself allows, and the real
replay's gap to it is what admission and pods cost on the test machine.

Admission follows the rules the replay configures in Kueue, by quota alone (Kueue admits
by quota; which node a pod lands on is the scheduler's, outside this model):

- **static**: each team's jobs in submit order, BestEffortFIFO (a job that does not fit
  under its team's quota is passed over, the next ones are tried), no borrowing;
- **shared**: the same, in one cohort: a job fits while the cohort has the GPUs (borrowing
  is unlimited); the teams' heads are tried in the order of their share (GPUs held above
  nominal / the cohort's, lowest first, as Kueue's fair sharing orders them), then by
  submit time; a job that fits within its team's nominal quota but not in the cohort
  reclaims: the newest jobs of the teams above their nominal are preempted (the team
  furthest above first) until it fits. A preempted job goes back to its queue in its
  submit place and later runs only what it had left (it checkpoints).

``overhead`` adds seconds to every attempt's hold (start-up and release, which the real
replay measures), so the model can show how such costs move the matching pool size.

>>> from typing import NamedTuple
>>> class J(NamedTuple):
...     name: str
...     team: str
...     submit: float
...     hold: int
...     gpus: int
>>> jobs = [J("a1", "a", 0.0, 10, 2), J("b1", "b", 1.0, 5, 2), J("a2", "a", 2.0, 5, 2)]
>>> simulate(jobs, {"a": 2, "b": 2}, shared=False)
{'a1': 0.0, 'b1': 0.0, 'a2': 8.0}
>>> simulate(jobs, {"a": 2, "b": 2}, shared=True)  # the pool is full until b1 ends
{'a1': 0.0, 'b1': 0.0, 'a2': 4.0}
>>> simulate(jobs[:1] + jobs[2:], {"a": 2, "b": 2}, shared=True)  # a2 borrows b's share
{'a1': 0.0, 'a2': 0.0}
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from _replay_stats import matching_gpus, percentile
from _replay_trace import scaled


class ReplayJob(Protocol):
    """What the model reads of a replayed job (``_replay_trace.ReplayJob`` has it)."""

    @property
    def name(self) -> str: ...
    @property
    def team(self) -> str: ...
    @property
    def submit(self) -> float: ...
    @property
    def hold(self) -> int: ...
    @property
    def gpus(self) -> int: ...


@dataclass
class ModelJob:
    """A job's state in the model (what :data:`Watch` sees of it)."""

    job: ReplayJob
    left: float  # seconds of hold still to run
    waited: float = 0.0
    queued_at: float | None = None
    started: float | None = None  # the running attempt's admission
    attempt: int = 0
    first: float | None = None  # its first admission
    hold: float = 0.0  # the running attempt's hold, overhead included


Watch = Callable[
    [float, ModelJob, Mapping[str, ModelJob], Mapping[str, list[ModelJob]], Sequence[ModelJob]],
    None,
]
"""Called as a job arrives that cannot start at once: the time, the job, the jobs running
(by name), each team's waiting jobs in their order and the jobs ended so far, in the order
they ended (the model's state: read, not kept)."""


def simulate(
    jobs: Sequence[ReplayJob],
    team_quotas: dict[str, int],
    shared: bool,
    overhead: float = 0.0,
    watch: Watch | None = None,
) -> dict[str, float]:
    """Each job's total queue wait (seconds, every wait for admission) by name, for the
    static split (``shared`` False) or the shared pool of ``team_quotas``; ``watch``: see
    :data:`Watch`."""
    state = {j.name: ModelJob(j, float(j.hold)) for j in jobs}
    arrivals = sorted(jobs, key=lambda j: (j.submit, j.name))
    waiting: dict[str, list[ModelJob]] = {t: [] for t in team_quotas}
    running: dict[str, ModelJob] = {}
    ends: list[tuple[float, int, str]] = []  # (time, attempt, name): lazily dropped if stale
    ended: list[ModelJob] = []
    used = dict.fromkeys(team_quotas, 0)
    pool = sum(team_quotas.values())
    order = {j.name: i for i, j in enumerate(arrivals)}
    i = 0
    now = 0.0

    def start(s: ModelJob) -> None:
        team = s.job.team
        waiting[team].remove(s)
        assert s.queued_at is not None
        s.waited += now - s.queued_at
        s.queued_at, s.started = None, now
        s.first = now if s.first is None else s.first
        s.hold = s.left + overhead
        s.attempt += 1
        running[s.job.name] = s
        used[team] += s.job.gpus
        heapq.heappush(ends, (now + s.hold, s.attempt, s.job.name))

    def stop(s: ModelJob, preempted: bool) -> None:
        assert s.started is not None
        del running[s.job.name]
        used[s.job.team] -= s.job.gpus
        if preempted:
            s.left = max(0.0, s.left - max(0.0, now - s.started - overhead))
            s.queued_at = now
            waiting[s.job.team].append(s)
            waiting[s.job.team].sort(key=lambda x: order[x.job.name])
        s.started = None

    def share(team: str) -> float:
        return max(0, used[team] - team_quotas[team]) / pool

    def reclaim(s: ModelJob) -> bool:
        need = s.job.gpus - (pool - sum(used.values()))
        victims: list[ModelJob] = []
        over = dict(used)
        for team in sorted(team_quotas, key=lambda t: -share(t)):
            mine = sorted(
                (r for r in running.values() if r.job.team == team),
                key=lambda r: (-(r.started or 0.0), -order[r.job.name]),
            )
            for r in mine:
                if need <= 0 or over[team] <= team_quotas[team]:
                    break
                victims.append(r)
                over[team] -= r.job.gpus
                need -= r.job.gpus
        if need > 0:
            return False
        for r in victims:
            stop(r, preempted=True)
        return True

    def fits(s: ModelJob) -> bool:
        """Whether ``s`` may start now (in the shared pool, reclaiming if it must)."""
        team, g = s.job.team, s.job.gpus
        if not shared:
            return used[team] + g <= team_quotas[team]
        if sum(used.values()) + g <= pool:
            return True
        return used[team] + g <= team_quotas[team] and reclaim(s)

    def next_fit() -> ModelJob | None:
        """The first job that may start: each team's in submit order (BestEffortFIFO), the
        teams in the shared pool by their share, then by their heads' submit order."""
        teams = [t for t in team_quotas if waiting[t]]
        if shared:
            teams.sort(key=lambda t: (share(t), order[waiting[t][0].job.name]))
        return next((s for t in teams for s in waiting[t] if fits(s)), None)

    while i < len(arrivals) or running:
        next_end = ends[0][0] if ends else float("inf")
        next_arrival = arrivals[i].submit if i < len(arrivals) else float("inf")
        now = min(next_end, next_arrival)
        if next_end <= next_arrival:
            _, attempt, name = heapq.heappop(ends)
            s = state[name]
            if name in running and s.attempt == attempt:
                s.left = 0.0
                stop(s, preempted=False)
                ended.append(s)
        else:
            s = state[arrivals[i].name]
            s.queued_at = now
            waiting[s.job.team].append(s)
            i += 1
        arrived = s if next_end > next_arrival else None
        while (s := next_fit()) is not None:  # each start changes the teams' shares
            start(s)
        if watch is not None and arrived is not None and arrived.started is None:
            watch(now, arrived, running, waiting, ended)
    return {name: s.waited for name, s in state.items()}


@dataclass(frozen=True)
class Scan:
    """The model's p90 waits (seconds): the static split's, the shared pool's by size
    ``(gpus, p90)`` from the whole pool down to half, and the size matching the static p90
    (:func:`_replay_stats.matching_gpus`'s answer)."""

    static_p90: float
    shared: list[tuple[int, float]]
    match: tuple[float | None, str]


def scan(jobs: Sequence[ReplayJob], team_quotas: dict[str, int], overhead: float = 0.0) -> Scan:
    """:func:`simulate` for the static split of ``team_quotas`` and for the shared pool at
    each size from their total down to half, the quotas scaled as the replay scales them."""

    def p90(quotas: dict[str, int], shared: bool) -> float:
        return percentile(list(simulate(jobs, quotas, shared, overhead).values()), 0.9)

    total = sum(team_quotas.values())
    static = p90(team_quotas, False)
    points = []
    for gpus in range(total, math.ceil(total / 2) - 1, -1):
        quotas = scaled(team_quotas, gpus / total)
        if sum(quotas.values()) == gpus:
            points.append((gpus, p90(quotas, True)))
    return Scan(static, points, matching_gpus(points, static))


if __name__ == "__main__":  # its examples
    import doctest

    raise SystemExit(doctest.testmod().failed)
