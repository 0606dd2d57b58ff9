"""When a waiting job will start: Kueue's admission replayed forward over the releases ahead.

Aviflow never decides admission (Kueue does, or the local backend's stand-in for it): this
only predicts it from what the queue reports. The inputs are a snapshot of the pool:

- each queue's limits (:class:`QueueLimits`): its nominal GPU quota, how much it may borrow
  from its cohort and lend to it, its cohort, whether it admits strictly in order;
- the jobs holding GPUs (:class:`Holding`), each with a window in which it releases them:
  from its time limit, its progress toward a declared number of steps, or the durations of
  the user's earlier runs of the same cell (:func:`aviflow.windows.release_window`);
- the waiting jobs in the order the queue reports (:class:`Waiting`: Kueue's visibility
  positions, else the Workloads' creation order), each with how long it will hold its GPUs
  once started: the durations of its cell's earlier runs, else the share of its time limit
  that the pool's recent jobs used, else up to its time limit
  (:func:`aviflow.windows.run_window`).

:func:`estimate` replays admission three times from ``now``: once with every job releasing at
the start of its window (the earliest a job can start), once at its end (the latest, as long
as every window ahead has an end) and once at its middle (the expected start, within those
two: each window's middle is its own best guess, the pace itself, the middle of the
cell's runs, of the pool's shares). At each release it admits what fits, as Kueue's scheduler
does: within a queue in its order (``BestEffortFIFO``: a later job that fits may pass a head
that does not; ``StrictFIFO``: the head blocks), across queues jobs that need no borrowing
first, then, where Kueue has fair sharing on, the borrower whose queue's share would be
lowest once admitted (:meth:`_Pool.share_after`, as Kueue's fair-sharing tournament ranks
them), then the oldest. A job fits its queue when the queue's use stays within its nominal
quota, or beyond it within its borrowing limit and what the cohort has unused (a queue's
``lendingLimit`` keeps the rest of its quota for itself). Where its queue reclaims (its
ClusterQueue's ``reclaimWithinCohort``, the chart's default), a job within the queue's
nominal quota starts at once, borrowers preempted. A job that cannot fit even in an empty
pool "never" starts, with the limit that forbids it. A job that a release lets in is
admitted within the queue's requeue lag of it (``requeue``: Kueue requeues the waiting
Workloads in batches of a second): each release that much later in the latest replay, half
of it in the expected one.

What it does not model, said in every estimate's ``assumed``: priorities other than the
queue order given, preemption among borrowers to even their shares, preemption of lower-priority
jobs within a queue, node fragmentation and topology (a job admitted by quota may still wait
for whole nodes), and jobs submitted after ``now``.

>>> pool = [QueueLimits("a", 8)]
>>> held = [Holding("r1", "a", 8, release=(100.0, 160.0))]
>>> est = estimate(0.0, pool, held, [Waiting("w1", "a", 4, runs_for=(10.0, 20.0))])["w1"]
>>> est.low, est.high, est.never
(100.0, 160.0, None)
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from aviflow import wire
from aviflow._units import format_duration, is_unix_time
from aviflow.wire import meta

UNKNOWN = math.inf  # a release with no known end
DRY_RUN_ID = "(this job)"  # a job not submitted yet, in a dry run's forecast
_MAX_COUNT = 1 << 31  # a larger count in a status file is not believed


def _time(v: object) -> bool:
    """A time as a status file may hold it: null, or Unix seconds a date can show."""
    return v is None or is_unix_time(v)


def _count(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _MAX_COUNT


@dataclass(frozen=True)
class QueueLimits:
    """A queue's GPU limits (a ClusterQueue's, or a local queue's quota).

    ``borrowing_limit``: GPUs beyond ``nominal`` it may borrow from its cohort (None: no
    limit; without a cohort it borrows nothing); ``lending_limit``: how much of its unused
    nominal quota others may borrow (None: all of it); ``strict``: StrictFIFO;
    ``fair_weight``: its weight in its cohort's fair sharing where Kueue has fair sharing on
    (None: off; then borrowers are admitted oldest first); ``reclaim``: whether a job within
    its nominal quota takes back what others borrowed of it (Kueue's ``reclaimWithinCohort``;
    None: as :func:`estimate`'s ``reclaim`` says for every queue)."""

    name: str
    nominal: int
    cohort: str | None = None
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    strict: bool = False
    fair_weight: float | None = None
    reclaim: bool | None = None


@dataclass(frozen=True)
class Holding:
    """A job holding ``gpus`` of queue ``queue`` until a time in ``release`` (absolute
    seconds; the end may be :data:`UNKNOWN`)."""

    id: str
    queue: str
    gpus: int
    release: tuple[float, float]


@dataclass(frozen=True)
class Waiting:
    """A waiting job, in the queue's order; ``runs_for``: how long it holds its GPUs once
    started (seconds, earliest and latest; the latest may be :data:`UNKNOWN`)."""

    id: str
    queue: str
    gpus: int
    runs_for: tuple[float, float] = (0.0, UNKNOWN)


def _window(est: Estimate) -> str:
    return est.window()


def _text(v: object) -> bool:
    return v is None or isinstance(v, str)


def _list(v: object) -> bool:
    return isinstance(v, list | tuple)


@wire.record(
    name="ExpectedStart",
    doc="When a waiting job is expected to start (aviflow/estimate.py), while QUEUED",
    order=("low", "high", "window", "never", "now", "assumed"),
    computed={
        "window": wire.Computed(
            _window,
            str,
            omit="empty",
            doc="The range in UTC, one word: now, never, 12-03T22:58..23:05Z, "
            "12-03T22:58Z.. (no later bound)",
        )
    },
    invalid="none",
)
@dataclass(frozen=True)
class Estimate:
    """When job ``id`` is expected to start (absolute seconds): between ``low`` and ``high``
    (``high`` None: no bound, a job ahead has no known end), at ``expected`` (None: no
    estimate of the point, as a status written before it has); ``never``: the limit that
    forbids it in an empty pool (then ``low`` and ``high`` are None); ``now``: it fits at
    once. ``assumed``: what the estimate takes for granted, for its reader."""

    id: str = field(metadata=meta(wire=False, missing=""))
    low: float | None = field(metadata=meta(check=_time, doc="Unix time, the earliest"))
    high: float | None = field(
        metadata=meta(check=_time, doc="Unix time, the latest (null: no bound)")
    )
    never: str | None = field(
        default=None,
        metadata=meta(
            omit="none", check=_text, clip=500, doc="The limit that forbids it in an empty pool"
        ),
    )
    assumed: tuple[str, ...] = field(
        default=(), metadata=meta(omit="empty", check=_list, clip=10, item_clip=300)
    )
    now: bool = field(default=False, metadata=meta(omit="empty", doc="It fits at once"))
    expected: float | None = field(
        default=None,
        metadata=meta(
            omit="none", check=_time,
            doc="Unix time, the expected start: every job ahead at the middle of its window",
        ),
    )  # fmt: skip

    def window(self) -> str:
        """The start as absolute UTC times, one word (a ``kubectl get trainjobs`` column,
        read without a clock of ours): ``now``, ``never``, ``12-03T22:58..23:05Z`` (a range;
        the date again where it changes), ``12-03T22:58Z..`` (no later bound).

        >>> Estimate("j", 1764802680.0, 1764803100.0).window()
        '12-03T22:58..23:05Z'
        >>> Estimate("j", 1764802680.0, 1764896400.0).window()
        '12-03T22:58..12-05T01:00Z'
        >>> Estimate("j", 1764802680.0, None).window(), Estimate("j", None, None, "x").window()
        ('12-03T22:58Z..', 'never')
        """
        if self.never is not None:
            return "never"
        if self.now:
            return "now"
        if self.low is None:
            return ""
        low = _utc(self.low)
        if self.high is None:
            return f"{low}Z.."
        high = _utc(self.high)
        if high == low:
            return f"{low}Z"
        same_day = high[:5] == low[:5]
        return f"{low}..{high[6:] if same_day else high}Z"

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)

    @classmethod
    def from_dict(cls, d: object) -> Estimate | None:
        """The estimate in a status file or an answer (None where it is absent or malformed:
        a reader shows no estimate rather than a wrong one)."""
        return wire.from_wire_or_none(cls, d)


def _utc(t: float) -> str:
    """``MM-DDTHH:MM`` in UTC, to the nearest minute."""
    minute = math.floor(t / 60 + 0.5) * 60
    return datetime.fromtimestamp(minute, UTC).strftime("%m-%dT%H:%M")


@dataclass
class _Pool:
    """Use of each queue during one replay."""

    limits: Mapping[str, QueueLimits]
    reclaim: bool
    capacity: int | None
    use: dict[str, int] = field(default_factory=dict)

    def guaranteed(self, q: QueueLimits) -> int:
        """The part of ``q``'s quota no other queue may borrow."""
        return q.nominal - q.lending_limit if q.lending_limit is not None else 0

    def members(self, q: QueueLimits) -> list[QueueLimits]:
        if q.cohort is None:
            return [q]
        return [m for m in self.limits.values() if m.cohort == q.cohort]

    def cohort_room(self, q: QueueLimits) -> int:
        """GPUs of ``q``'s cohort not used beyond the queues' guaranteed parts."""
        lendable = used = 0
        for m in self.members(q):
            lendable += m.nominal - self.guaranteed(m)
            used += max(0, self.use.get(m.name, 0) - self.guaranteed(m))
        return lendable - used

    def reclaims(self, q: QueueLimits) -> bool:
        """Whether ``q`` takes back what others borrowed of its quota."""
        return self.reclaim if q.reclaim is None else q.reclaim

    def fits_machine(self, w: Waiting) -> bool:
        return self.capacity is None or sum(self.use.values()) + w.gpus <= self.capacity

    def needs_borrowing(self, w: Waiting) -> bool:
        return self.use.get(w.queue, 0) + w.gpus > self.limits[w.queue].nominal

    def share_after(self, w: Waiting) -> float:
        """Kueue's fair-sharing share of ``w``'s queue were ``w`` admitted: the GPUs it would
        borrow per thousand lendable in its cohort, over its weight (0 where its queue is
        not in fair sharing or would borrow nothing; a weight of 0 that borrows: last)."""
        q = self.limits[w.queue]
        borrowed = self.use.get(w.queue, 0) + w.gpus - q.nominal
        if q.fair_weight is None or q.cohort is None or borrowed <= 0:
            return 0.0
        lendable = sum(m.nominal - self.guaranteed(m) for m in self.members(q))
        if q.fair_weight <= 0 or lendable <= 0:
            return math.inf
        return borrowed * 1000.0 / lendable / q.fair_weight

    def fits(self, w: Waiting, *, machine: bool = True) -> bool:
        """Whether ``w`` fits its queue's limits now (and, ``machine``, the capacity)."""
        q = self.limits[w.queue]
        mine = self.use.get(w.queue, 0)
        if machine and not self.fits_machine(w):
            return False
        if q.cohort is None:
            return mine + w.gpus <= q.nominal
        if self.reclaims(q) and mine + w.gpus <= q.nominal:
            return True  # borrowers in the cohort are preempted for it
        if q.borrowing_limit is not None and mine + w.gpus > q.nominal + q.borrowing_limit:
            return False
        more = max(0, mine + w.gpus - self.guaranteed(q)) - max(0, mine - self.guaranteed(q))
        return more <= self.cohort_room(q)


def never_reason(
    w: Waiting, limits: Mapping[str, QueueLimits], capacity: int | None = None
) -> str | None:
    """Why ``w`` cannot start even in an empty pool (None: it can).

    >>> never_reason(Waiting("j", "a", 16), {"a": QueueLimits("a", 8)})
    "needs 16 GPUs; queue 'a' may hold at most 8 (its quota, 8, and no cohort to borrow from)"
    """
    q = limits.get(w.queue)
    if q is None:
        return f"queue {w.queue!r} does not exist"
    if capacity is not None and w.gpus > capacity:
        return f"needs {w.gpus} GPUs; the pool has {capacity}"
    if q.cohort is None:
        most, why = q.nominal, f"its quota, {q.nominal}, and no cohort to borrow from"
    else:
        others = sum(
            m.nominal - (m.nominal - m.lending_limit if m.lending_limit is not None else 0)
            for m in limits.values()
            if m.cohort == q.cohort and m.name != q.name
        )
        borrow = others if q.borrowing_limit is None else min(others, q.borrowing_limit)
        most = q.nominal + borrow
        limit = (
            f"borrowing limit {q.borrowing_limit}"
            if q.borrowing_limit is not None and q.borrowing_limit < others
            else f"{others} lendable in cohort {q.cohort!r}"
        )
        why = f"its quota, {q.nominal}, plus at most {borrow} borrowed ({limit})"
    if w.gpus > most:
        return f"needs {w.gpus} GPUs; queue {w.queue!r} may hold at most {most} ({why})"
    return None


def _point(window: tuple[float, float], at: float) -> float:
    """The point ``at`` (0-1) of ``window``; :data:`UNKNOWN` past its start where it has no
    end.

    >>> _point((10.0, 30.0), 0.5), _point((10.0, UNKNOWN), 0.0), _point((10.0, UNKNOWN), 0.5)
    (20.0, 10.0, inf)
    """
    low, high = window
    if at <= 0:
        return low
    if high == UNKNOWN:
        return UNKNOWN
    return low + at * (high - low)


def _replay(
    now: float,
    limits: Mapping[str, QueueLimits],
    holding: Sequence[Holding],
    waiting: Sequence[Waiting],
    *,
    at: float,
    reclaim: bool,
    capacity: int | None,
    machine_fifo: bool = False,
    arriving: Sequence[tuple[float, Waiting]] = (),
    requeue: float = 0.0,
) -> dict[str, float]:
    """Start times of the waiting jobs when every job releases at the point ``at`` of its
    window (0: its start, 1: its end, 0.5: its middle; a window with no end releases at
    once at 0, never otherwise); a job with no start time never starts in this replay.
    ``machine_fifo``: the next job its queue allows waits for the machine's capacity and
    holds back every later one (the local backend's rule); ``arriving``: jobs that join the
    queues' ends at the given times; ``requeue``: the admission's lag after a release, of
    which the point ``at`` is taken (see :func:`estimate`)."""
    pool = _Pool(limits, reclaim, capacity)
    lag = at * max(0.0, requeue)  # a release lets the jobs it fits in this much later
    ends: list[tuple[float, str, int]] = []  # (time, queue, gpus) of every release ahead
    for h in holding:
        pool.use[h.queue] = pool.use.get(h.queue, 0) + h.gpus
        ends.append((max(now, _point(h.release, at) + lag), h.queue, h.gpus))
    left = [w for w in waiting if w.queue in limits and never_reason(w, limits, capacity) is None]
    later = sorted(
        ((max(now, t), i, w) for i, (t, w) in enumerate(arriving)
         if w.queue in limits and never_reason(w, limits, capacity) is None),
        key=lambda a: a[:2],
    )  # fmt: skip
    targets = {w.id for w in left}
    started: dict[str, float] = {}
    t = now
    while True:
        for e in [e for e in ends if e[0] <= t]:  # every release due by t
            ends.remove(e)
            pool.use[e[1]] -= e[2]
        while later and later[0][0] <= t:  # every submission due by t, at its queue's end
            left.append(later.pop(0)[2])
        while True:  # admit at t all that fits, in Kueue's order
            heads: list[tuple[bool, float, int, Waiting]] = []
            for name, queue in limits.items():
                for order, w in enumerate(left):
                    if w.queue != name:
                        continue
                    if pool.fits(w, machine=not machine_fifo):
                        heads.append((pool.needs_borrowing(w), pool.share_after(w), order, w))
                        break
                    if queue.strict:
                        break
            if not heads:
                break
            w = min(heads, key=lambda h: h[:3])[3]
            if machine_fifo and not pool.fits_machine(w):
                break
            left.remove(w)
            started[w.id] = t
            pool.use[w.queue] = pool.use.get(w.queue, 0) + w.gpus
            ends.append((t + _point(w.runs_for, at) + lag, w.queue, w.gpus))
        released = [e[0] for e in ends if e[0] != UNKNOWN]
        if targets <= started.keys() or not released:  # done, or nothing more frees GPUs
            break
        t = min(released + [a[0] for a in later[:1]])
    return started


def estimate(
    now: float,
    limits: Iterable[QueueLimits],
    holding: Sequence[Holding],
    waiting: Sequence[Waiting],
    *,
    reclaim: bool = True,
    capacity: int | None = None,
    machine_fifo: bool = False,
    assumed: Sequence[str] = (),
    admission_delay: float = 0.0,
    arriving: Sequence[tuple[float, Waiting]] = (),
    requeue: float = 0.0,
) -> dict[str, Estimate]:
    """Each waiting job's :class:`Estimate` (see the module docstring). ``reclaim``: whether
    a queue that does not say (:attr:`QueueLimits.reclaim` None) reclaims; ``capacity``: the
    pool's GPUs where fewer than its queues' quotas (the local backend's machine), and
    ``machine_fifo`` its rule (see :func:`_replay`); ``assumed``: what the caller took for
    granted in the windows it gave (added to each); ``admission_delay``: the seconds the
    queue has lately taken to admit a job that fits at once (the caller measures it): such a
    job still says ``now``, its latest start that much later; ``arriving``: jobs known to
    be submitted later, ``(time, job)``, each joining its queue's end at its time (only
    ``bench/replay_explain.py`` knows them: no forecast does); ``requeue``: the seconds the
    queue may take to admit a job after the release that lets it in
    (:data:`aviflow.k8s.forecast.KUEUE_REQUEUE`), each release that much later in the
    latest replay, half of it in the expected one, none in the earliest.

    >>> est = estimate(0.0, [QueueLimits("a", 8)], [], [Waiting("w", "a", 8)],
    ...                admission_delay=3.0)["w"]
    >>> est.low, est.high, est.now
    (0.0, 3.0, True)
    >>> held = [Holding("r", "a", 8, release=(10.0, 10.0))]
    >>> est = estimate(0.0, [QueueLimits("a", 8)], held, [Waiting("w", "a", 8)], requeue=1.0)
    >>> est["w"].low, est["w"].expected, est["w"].high
    (10.0, 10.5, 11.0)
    """
    by_name = {q.name: q for q in limits}
    kw = {"reclaim": reclaim, "capacity": capacity, "machine_fifo": machine_fifo,
          "arriving": arriving, "requeue": requeue}  # fmt: skip
    early = _replay(now, by_name, holding, waiting, at=0.0, **kw)  # type: ignore[arg-type]
    late = _replay(now, by_name, holding, waiting, at=1.0, **kw)  # type: ignore[arg-type]
    middle = _replay(now, by_name, holding, waiting, at=0.5, **kw)  # type: ignore[arg-type]
    notes = (*assumed, *LIMITS) if not arriving else (*assumed, ARRIVING, *LIMITS[1:])
    out = {}
    for w in waiting:
        never = never_reason(w, by_name, capacity)
        if never is not None:
            out[w.id] = Estimate(w.id, None, None, never, notes)
            continue
        low, high = early.get(w.id), late.get(w.id)
        if low is not None and high is not None and high < low:
            low, high = high, low  # a later release can let a smaller job pass sooner
        low = low if low is not None else high
        at_once = low == high == now
        if at_once and high is not None:
            high += max(0.0, admission_delay)
        expected = middle.get(w.id)  # within the range (a later release can pass a job)
        if expected is not None and low is not None:
            expected = max(expected, low) if high is None else min(max(expected, low), high)
        out[w.id] = Estimate(w.id, low, high, None, notes, now=at_once, expected=expected)
    return out


def _queue_name(v: object) -> bool:
    return isinstance(v, str)


_COUNT = meta(check=_count)


@wire.record(doc="The numbers behind a wait, while QUEUED", invalid="none")
@dataclass(frozen=True)
class WaitNumbers:
    """Why a job waits, in numbers its owner may see (no other team's job names): its queue's
    ``quota``, the GPUs its queue ``holds`` now, of which ``borrowed`` beyond the quota, the
    GPUs idle in the cohort that it could borrow (``lendable``), and the jobs ahead of it in
    its own queue (``ahead``) with their GPUs (``ahead_gpus``)."""

    queue: str = field(metadata=meta(check=_queue_name, clip=253))
    quota: int = field(metadata=_COUNT)
    holds: int = field(metadata=meta(check=_count, doc="GPUs its queue holds now"))
    borrowed: int = field(metadata=meta(check=_count, doc="of which beyond its quota"))
    lendable: int = field(
        metadata=meta(check=_count, doc="GPUs idle in its cohort it could borrow")
    )
    ahead: int = field(metadata=meta(check=_count, doc="jobs ahead of it in its queue"))
    ahead_gpus: int = field(metadata=_COUNT)

    @classmethod
    def from_dict(cls, d: object) -> WaitNumbers | None:
        """The numbers in a status file or an answer (None where absent or malformed)."""
        return wire.from_wire_or_none(cls, d)

    def to_dict(self) -> dict[str, Any]:
        return wire.to_wire(self)


def cohort_lendable(queue: str, limits: Iterable[QueueLimits], use: Mapping[str, int]) -> int:
    """GPUs idle in ``queue``'s cohort that the other queues lend and ``queue`` could borrow
    now: each other member's quota up to its ``lending_limit``, less what is used of it
    (``use``: GPUs each queue holds, by name). 0 without a cohort or for an unknown queue.
    Borrowing limits are not applied (they bound the queue, not the cohort's idle GPUs).

    >>> pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 8, cohort="c", lending_limit=6),
    ...         QueueLimits("x", 16)]
    >>> cohort_lendable("a", pool, {"a": 6, "b": 1})  # b lends 6, of which a borrows 2
    4
    >>> cohort_lendable("b", pool, {"a": 1}), cohort_lendable("x", pool, {})
    (3, 0)
    """
    by_name = {q.name: q for q in limits}
    q = by_name.get(queue)
    if q is None or q.cohort is None:
        return 0
    pool = _Pool(by_name, reclaim=False, capacity=None, use=dict(use))
    kept = pool.guaranteed(q)
    own_idle = max(0, (q.nominal - kept) - max(0, pool.use.get(q.name, 0) - kept))
    return max(0, pool.cohort_room(q) - own_idle)


def wait_numbers(
    job: Waiting,
    limits: Iterable[QueueLimits],
    holding: Sequence[Holding],
    waiting: Sequence[Waiting],
) -> WaitNumbers | None:
    """The numbers behind ``job``'s wait now (None: its queue is unknown).

    >>> pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 4, cohort="c")]
    >>> held = [Holding("x", "a", 6, (0.0, 9.0)), Holding("y", "b", 1, (0.0, 9.0))]
    >>> mine = Waiting("w", "a", 2)
    >>> wait_numbers(mine, pool, held, [Waiting("v", "a", 4), mine]).to_dict()
    {'queue': 'a', 'quota': 4, 'holds': 6, 'borrowed': 2, 'lendable': 1, 'ahead': 1, 'aheadGpus': 4}
    """
    by_name = {q.name: q for q in limits}
    q = by_name.get(job.queue)
    if q is None:
        return None
    pool = _Pool(by_name, reclaim=False, capacity=None)
    for h in holding:
        pool.use[h.queue] = pool.use.get(h.queue, 0) + h.gpus
    holds = pool.use.get(q.name, 0)
    lendable = cohort_lendable(q.name, by_name.values(), pool.use)
    index = next((i for i, w in enumerate(waiting) if w.id == job.id), len(waiting))
    ahead = [w for w in waiting[:index] if w.queue == q.name]
    return WaitNumbers(
        q.name, q.nominal, holds, max(0, holds - q.nominal), lendable, len(ahead),
        sum(w.gpus for w in ahead),
    )  # fmt: skip


def describe(est: Estimate, now: float) -> str:
    """One line for a person: when the job is expected to start, from ``now``.

    >>> describe(Estimate("j", 160.0, 700.0), 100.0)
    'expected to start in about 6m (between 1m and 10m from now)'
    >>> describe(Estimate("j", 160.0, 700.0, expected=400.0), 100.0)
    'expected to start in about 5m (between 1m and 10m from now)'
    >>> describe(Estimate("j", 100.0, 100.0, now=True), 100.0)
    'fits now'
    >>> describe(Estimate("j", 400.0, None), 100.0)
    'expected to start in 5m at the earliest; no later bound (a job ahead has no time limit)'
    """
    if est.never is not None:
        return f"never at this quota: {est.never}"
    if est.now:
        return "fits now"
    low = max(0.0, (est.low or now) - now)
    if est.high is None:
        return (
            f"expected to start in {_rough(low)} at the earliest; no later bound "
            "(a job ahead has no time limit)"
        )
    high = max(0.0, est.high - now)
    point = (low + high) / 2 if est.expected is None else max(0.0, est.expected - now)
    if high - low < 60:
        return f"expected to start in about {_rough(point)}"
    return (
        f"expected to start in about {_rough(point)} "
        f"(between {_rough(low)} and {_rough(high)} from now)"
    )


def _rough(seconds: float) -> str:
    """A duration to the minute (seconds under two minutes)."""
    if seconds < 120:
        return format_duration(seconds)
    return format_duration(round(seconds / 60) * 60)


ARRIVING = "queue order as reported; the jobs submitted later as given"
LIMITS = (
    "queue order as reported; no jobs submitted later",
    "no preemption among borrowers to even their shares, no preemption within a queue, "
    "no node fragmentation",
)
