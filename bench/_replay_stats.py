"""What ``bench/replay.py`` reports, from what it measured (pure; no cluster): each job's
waits and GPU holdings from its lifecycle events, statistics per team, the pool size at
which the shared pool matches the static split, and the error of the expected-start
estimates.

>>> run = parse("a", 2, [("QUEUED", 0.0), ("STARTING", 3.0), ("RUNNING", 4.0),
...                      ("PREEMPTED", 6.0), ("QUEUED", 6.0), ("STARTING", 8.0),
...                      ("SUCCEEDED", 10.0)])
>>> run.wait, run.held, run.preempted, run.end
(5.0, [(3.0, 6.0), (8.0, 10.0)], [3.0], 'SUCCEEDED')
>>> summary([1.0, 2.0, 3.0, 10.0])
Summary(n=4, mean=4.0, p50=2.5, p90=7.9)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

ADMITTED = "STARTING"  # the event of an attempt's admission: its GPUs are reserved from then
QUEUED = "QUEUED"
ENDS = {"SUCCEEDED", "FAILED", "CANCELLED", "RESTARTING", "EVICTED", "PREEMPTED"}
FINAL = {"SUCCEEDED", "FAILED", "CANCELLED"}


@dataclass
class Run:
    """One job's measured life: seconds it waited in all (every QUEUED to the next
    admission), when it was submitted and first admitted, the ``(from, to)`` of each
    attempt's hold on its GPUs, the seconds held by each attempt that was preempted, and
    its final state (None: not finished); ``startup``: seconds from each attempt's admission
    to its RUNNING (its pods up, beating)."""

    team: str
    gpus: int
    submitted: float | None = None
    first_start: float | None = None
    wait: float = 0.0
    held: list[tuple[float, float]] = field(default_factory=list)
    preempted: list[float] = field(default_factory=list)
    end: str | None = None
    startup: list[float] = field(default_factory=list)  # admission -> RUNNING, per attempt


def parse(team: str, gpus: int, events: Iterable[tuple[str, float]]) -> Run:
    """A job's :class:`Run` from its events ``(type, time)`` in order."""
    run = Run(team, gpus)
    queued_at: float | None = None
    since: float | None = None
    for kind, t in events:
        if kind == QUEUED:
            if run.submitted is None:
                run.submitted = t
            if queued_at is None:
                queued_at = t
        elif kind == ADMITTED and since is None:
            if queued_at is not None:
                run.wait += max(0.0, t - queued_at)  # Kueue's whole seconds
                queued_at = None
            if run.first_start is None:
                run.first_start = t
            since = t
        elif kind == "RUNNING" and since is not None and len(run.startup) < len(run.held) + 1:
            run.startup.append(max(0.0, t - since))
        if kind in ENDS:
            if since is not None:
                run.held.append((since, t))
                if kind == "PREEMPTED":
                    run.preempted.append(t - since)
                since = None
            if kind in FINAL:
                run.end = kind
    return run


def release_lag(
    beats: Iterable[dict[str, Any]], events: Iterable[tuple[str, float]]
) -> float | None:
    """Seconds from a successful job's last pod exit (its node heartbeats' ``exited``
    times, the last attempt's) to its ``SUCCEEDED`` event (the controller saw its Job
    complete; Kueue frees its quota on the same sight): the release that compression does
    not shrink. None where it did not succeed or no pod said it exited.

    >>> beats = [{"state": "exited", "time": 10.2}, {"state": "exited", "time": 10.5}]
    >>> release_lag(beats, [("STARTING", 0.0), ("SUCCEEDED", 11.7)])
    1.2
    >>> release_lag([{"state": "running", "time": 9.0}], [("SUCCEEDED", 11.7)]) is None
    True
    >>> release_lag([{"state": "exited", "time": "10"}], [("SUCCEEDED", 11.7)]) is None
    True
    """
    # a beat is the job's own file: a time of another type is not believed
    exits = [
        float(t)
        for b in beats
        if b.get("state") == "exited"
        and isinstance(t := b.get("time"), int | float)
        and not isinstance(t, bool)
    ]
    ended = [t for k, t in events if k == "SUCCEEDED"]
    return round(ended[-1] - max(exits), 6) if exits and ended else None


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, linearly interpolated (numpy's default).

    >>> percentile([0.0, 10.0], 0.9), percentile([5.0], 0.5)
    (9.0, 5.0)
    """
    if not values:
        return math.nan
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    p50: float
    p90: float

    def scaled(self, by: float) -> Summary:
        """The same in other units (each value divided by ``by``)."""
        return Summary(self.n, self.mean / by, self.p50 / by, self.p90 / by)


def summary(values: Sequence[float]) -> Summary:
    """Count, mean, p50 and p90 of ``values`` (rounded to 1e-9)."""
    if not values:
        return Summary(0, math.nan, math.nan, math.nan)

    def r(v: float) -> float:
        return round(v, 9)

    return Summary(
        len(values), r(sum(values) / len(values)), r(percentile(values, 0.5)),
        r(percentile(values, 0.9)),
    )  # fmt: skip


def busy_window(runs: Sequence[Run]) -> tuple[float, float] | None:
    """From the first submission to the last release of GPUs (None: nothing ran)."""
    starts = [r.submitted for r in runs if r.submitted is not None]
    ends = [to for r in runs for _, to in r.held]
    if not starts or not ends:
        return None
    return min(starts), max(ends)


def allocation(runs: Sequence[Run], pool: int, window: tuple[float, float] | None) -> float:
    """The share of ``pool`` GPUs held by ``runs`` over ``window`` (0..1; GPU-seconds
    held within it over ``pool`` x its length)."""
    if window is None or window[1] <= window[0] or pool <= 0:
        return math.nan
    a, b = window
    held = sum(r.gpus * max(0.0, min(to, b) - max(frm, a)) for r in runs for frm, to in r.held)
    return held / (pool * (b - a))


def preemption_cost(runs: Sequence[Run]) -> tuple[int, float]:
    """How many attempts were preempted and the GPU-seconds they had held."""
    return (
        sum(len(r.preempted) for r in runs),
        sum(r.gpus * s for r in runs for s in r.preempted),
    )


def matching_gpus(points: Sequence[tuple[int, float]], target: float) -> tuple[float | None, str]:
    """The fewest GPUs at which a p90 wait of at most ``target`` is reached, from a scan of
    ``(gpus, p90)``: the smallest size from which every larger scanned size meets it,
    interpolated linearly with the size below it. ``("at most", g)`` when even the smallest
    scanned size ``g`` meets it; ``(None, "not reached")`` when none does.

    >>> matching_gpus([(32, 1.0), (24, 2.0), (16, 6.0)], 4.0)
    (20.0, 'interpolated')
    >>> matching_gpus([(32, 1.0), (16, 2.0)], 4.0), matching_gpus([(32, 9.0)], 4.0)
    ((16.0, 'at most'), (None, 'not reached'))
    """
    pts = sorted(points)
    good = len(pts)
    while good > 0 and pts[good - 1][1] <= target:
        good -= 1
    if good == len(pts):
        return None, "not reached"
    if good == 0:
        return float(pts[0][0]), "at most"
    (g0, p0), (g1, p1) = pts[good - 1], pts[good]
    return round(g0 + (p0 - target) / (p0 - p1) * (g1 - g0), 6), "interpolated"


@dataclass(frozen=True)
class Sample:
    """An expected start read from a queued job's status at ``at``: ``[low, high]`` (high
    None: unbounded), its ``expected`` point (None: the status has none), and when the job
    was in fact admitted."""

    at: float
    low: float
    high: float | None
    started: float
    expected: float | None = None


def estimate_errors(
    samples: Iterable[Sample], floor: float, *, point: str = "middle"
) -> tuple[list[float], int, int]:
    """``|point - started| / (started - at)`` per sample whose realised wait from the
    sample is at least ``floor`` seconds (shorter ones are counted, not rated), the point
    being the middle of ``[low, high]``, with ``point="high"`` its latest bound, with
    ``point="expected"`` the estimate's expected start (the middle where it has none);
    ``low`` where unbounded. With how many were too short and how many realised starts
    fell within ``[low, high]``.

    >>> estimate_errors([Sample(0.0, 0.0, 10.0, 8.0), Sample(0.0, 0.0, None, 4.0),
    ...                  Sample(5.0, 5.0, 6.0, 5.5)], floor=1.0)
    ([0.375, 1.0], 1, 3)
    >>> estimate_errors([Sample(0.0, 0.0, 10.0, 8.0)], floor=1.0, point="high")
    ([0.25], 0, 1)
    >>> estimate_errors([Sample(0.0, 0.0, 10.0, 8.0, 7.0)], floor=1.0, point="expected")
    ([0.125], 0, 1)
    """
    if point not in ("middle", "high", "expected"):
        raise ValueError(f"point: 'middle', 'high' or 'expected', not {point!r}")
    errors: list[float] = []
    short = within = 0
    for s in samples:
        if s.low <= s.started <= (math.inf if s.high is None else s.high):
            within += 1
        waited = s.started - s.at
        if waited < floor:
            short += 1
            continue
        middle = s.low if s.high is None else (s.low + s.high) / 2
        at = s.high if point == "high" and s.high is not None else middle
        if point == "expected" and s.expected is not None:
            at = s.expected
        errors.append(round(abs(at - s.started) / waited, 9))
    return errors, short, within


if __name__ == "__main__":  # its examples
    import doctest

    raise SystemExit(doctest.testmod().failed)
