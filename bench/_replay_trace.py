"""The Philly trace slice for ``bench/replay.py``: read, cut, time-compressed, shaped for a pool
(pure; no cluster).

A trace row is a job as the Philly trace recorded it (submit time, duration in seconds,
GPUs, virtual cluster = team). :func:`cut` takes a window of some teams and thins each team
evenly to at most N jobs (the shipped slice, ``bench/data/philly-slice.csv``, is one such
cut); :func:`quotas` splits a pool's GPUs among the teams in proportion to their demand;
:func:`replay_jobs` compresses time (``hour`` seconds per trace hour, durations capped) and
shapes each job for the pool (no larger than its team's quota, 8 GPUs a node).

>>> rows = [TraceRow("a", 0.0, 3600.0, 2), TraceRow("b", 1800.0, 600.0, 1)]
>>> q = quotas(rows, 8, max_hours=6.0)
>>> q
{'a': 7, 'b': 1}
>>> [(j.team, j.submit, j.hold, j.nodes, j.gpus_per_node) for j in replay_jobs(rows, q, 4.0)]
[('a', 0.0, 4, 1, 2), ('b', 2.0, 1, 1, 1)]
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

GPUS_PER_NODE = 8
COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")


@dataclass(frozen=True)
class TraceRow:
    """One job of the trace: its team (virtual cluster), submit time (Unix seconds),
    duration (seconds) and GPUs."""

    team: str
    submitted: float
    duration: float
    gpus: int


@dataclass(frozen=True)
class ReplayJob:
    """A trace job as replayed: ``submit`` seconds after the replay starts, holding
    ``nodes`` x ``gpus_per_node`` GPUs for ``hold`` whole seconds (at least 1)."""

    name: str
    team: str
    submit: float
    hold: int
    nodes: int
    gpus_per_node: int
    trace_gpus: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def _when(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def read(path: Path) -> list[TraceRow]:
    """The rows of a trace CSV (the columns of :data:`COLUMNS`), in submit order. A row
    that does not parse (or has no GPU, or a negative duration) raises ``ValueError``."""
    out = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != COLUMNS:
            raise ValueError(f"{path}: columns {reader.fieldnames}, expected {list(COLUMNS)}")
        for n, rec in enumerate(reader, start=2):
            try:
                row = TraceRow(
                    rec["cluster"], _when(rec["timestamp"]), float(rec["duration"]),
                    int(rec["num_gpus"]),
                )  # fmt: skip
            except (TypeError, ValueError) as exc:
                raise ValueError(f"{path}:{n}: {exc}") from None
            if row.gpus < 1 or not (math.isfinite(row.duration) and row.duration >= 0):
                raise ValueError(f"{path}:{n}: {row.gpus} GPUs for {row.duration} s")
            out.append(row)
    return sorted(out, key=lambda r: r.submitted)


def write(path: Path, rows: Iterable[TraceRow]) -> None:
    """``rows`` as a trace CSV (as :func:`read` reads it)."""
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(COLUMNS)
        for r in rows:
            when = datetime.fromtimestamp(r.submitted, UTC).strftime("%Y-%m-%d %H:%M:%S")
            w.writerow([when, f"{r.duration:.1f}", r.gpus, f"{r.duration * r.gpus:.1f}", r.team])


def cut(
    rows: Sequence[TraceRow], start: float, hours: float, teams: Sequence[str], per_team: int
) -> list[TraceRow]:
    """The jobs of ``teams`` submitted in ``[start, start + hours)``, each team's thinned
    evenly to at most ``per_team`` (every k-th in submit order, k = ceil(n / per_team))."""
    end = start + hours * 3600
    out: list[TraceRow] = []
    for team in teams:
        mine = [r for r in rows if r.team == team and start <= r.submitted < end]
        step = max(1, math.ceil(len(mine) / per_team)) if per_team > 0 else len(mine) + 1
        out.extend(mine[::step])
    return sorted(out, key=lambda r: (r.submitted, r.team))


def demand(row: TraceRow, max_hours: float) -> float:
    """GPU-hours of ``row`` with its duration capped at ``max_hours`` and at most 8 GPUs
    (a node's) counted: what it asks of a team's share."""
    return min(row.gpus, GPUS_PER_NODE) * min(row.duration / 3600, max_hours)


def split(total: int, weights: dict[str, float], least: int = 1) -> dict[str, int]:
    """``total`` split in proportion to ``weights`` (largest remainder; ties by name), each
    at least ``least`` (taken from the largest shares).

    >>> split(10, {"a": 1.0, "b": 1.0, "c": 1.0})
    {'a': 4, 'b': 3, 'c': 3}
    >>> split(8, {"a": 100.0, "b": 0.0}, least=2)
    {'a': 6, 'b': 2}
    """
    if total < least * len(weights):
        raise ValueError(f"{total} GPUs cannot give {len(weights)} teams {least} each")
    names = sorted(weights)
    mass = sum(weights.values())
    exact = {t: total * (weights[t] / mass if mass > 0 else 1 / len(names)) for t in names}
    out = {t: math.floor(exact[t]) for t in names}
    for t in sorted(names, key=lambda t: (-(exact[t] - out[t]), t))[: total - sum(out.values())]:
        out[t] += 1
    for t in names:
        while out[t] < least:
            donor = max(names, key=lambda d: (out[d], d))
            out[donor] -= 1
            out[t] += 1
    return out


def quotas(rows: Sequence[TraceRow], pool: int, max_hours: float) -> dict[str, int]:
    """Each team's nominal GPU quota: the pool split by its demand (:func:`demand`), each
    team at least 1 GPU."""
    weights: dict[str, float] = {}
    for r in rows:
        weights[r.team] = weights.get(r.team, 0.0) + demand(r, max_hours)
    return split(pool, weights)


def scaled(team_quotas: dict[str, int], fraction: float) -> dict[str, int]:
    """The same quotas for a pool of ``round(fraction * total)`` GPUs, in the same
    proportions (for the scan of pool sizes)."""
    total = round(fraction * sum(team_quotas.values()))
    return split(total, {t: float(q) for t, q in team_quotas.items()})


def shape(gpus: int, quota: int) -> tuple[int, int]:
    """``(nodes, gpus per node)`` of a job of ``gpus`` in a team of ``quota``: capped at the
    quota; beyond a node, whole 8-GPU nodes (rounded down).

    >>> shape(4, 16), shape(16, 16), shape(32, 12), shape(8, 3)
    ((1, 4), (2, 8), (1, 8), (1, 3))
    """
    g = max(1, min(gpus, quota))
    if g <= GPUS_PER_NODE:
        return 1, g
    return g // GPUS_PER_NODE, GPUS_PER_NODE


def time_limit(hold: int) -> int:
    """A replayed job's ``timeLimit`` (seconds, counted from its admission): its hold, and
    room for its pod to start (2-20 s on this loaded machine) and for the controller to see
    its end.

    >>> time_limit(1), time_limit(36)
    (22, 60)
    """
    return hold + 20 + math.ceil(hold / 10)


def replay_jobs(
    rows: Sequence[TraceRow], team_quotas: dict[str, int], hour: float, max_hours: float = 6.0
) -> list[ReplayJob]:
    """``rows`` compressed to ``hour`` seconds per trace hour from the first submission,
    durations capped at ``max_hours`` trace hours and rounded to whole seconds (at least
    1), shaped by :func:`shape` for their team's quota. Names are ``r<index>-<team>``."""
    if not rows:
        return []
    t0 = min(r.submitted for r in rows)
    out = []
    for i, r in enumerate(sorted(rows, key=lambda r: (r.submitted, r.team))):
        nodes, per_node = shape(r.gpus, team_quotas[r.team])
        hold = max(1, round(min(r.duration / 3600, max_hours) * hour))
        submit = round((r.submitted - t0) / 3600 * hour, 3)
        out.append(ReplayJob(f"r{i:04d}-{r.team}", r.team, submit, hold, nodes, per_node, r.gpus))
    return out


if __name__ == "__main__":  # its examples
    import doctest

    raise SystemExit(doctest.testmod().failed)
