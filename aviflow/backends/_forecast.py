"""Expected starts on the local backend: its queues and machine as :mod:`aviflow.estimate`'s
pool, read from the run store.

A started job releases its slots at the pace of the steps it logged toward a declared
total (:mod:`aviflow.pace`), else after as long as the user's earlier successful runs of its
cell held theirs (:mod:`aviflow.history`), else for the part of its ``timeLimit`` the
store's recent successful runs that held theirs as long held, else by its ``timeLimit``
(what it has left of it, over all its attempts), or at an unknown time without any; a waiting job holds them, once
started, as long as its cell's earlier successful runs did, else for the part of its
``timeLimit`` the store's recent successful runs held, else for up to its own ``timeLimit``
(:func:`~aviflow.windows.run_window`). Queues admit strictly in order, and the next job a queue allows
waits for room on the machine, holding back every later one (:mod:`._admission`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aviflow.backends import _admission
from aviflow.errors import AviflowError
from aviflow.estimate import (
    Estimate,
    Holding,
    QueueLimits,
    Waiting,
    WaitNumbers,
    estimate,
    wait_numbers,
)
from aviflow.history import CellHistory
from aviflow.pace import PaceCache
from aviflow.store import EventsCache, RunDir, RunStore
from aviflow.windows import Share, run_window

ASSUMED = (
    "running jobs end at the pace of the steps they logged toward a declared total, else "
    "after as long as their cell's earlier successful runs took",
    "running jobs with neither end within the part of their time limit the store's recent "
    "successful runs with a limit like theirs (half to twice) that held theirs as long held "
    "(10th to 90th percentile), else by their time limit, else at an unknown time",
    "waiting jobs, once started, hold their slots as long as their cell's earlier successful "
    "runs did, else for the part of their time limit the store's recent successful runs with "
    "a limit like theirs (half to twice) held (10th to 90th percentile), else up to their "
    "time limit",
)


def _holding(
    store: RunStore,
    job_id: str,
    now: float,
    events: EventsCache,
    paces: PaceCache,
    history: CellHistory,
    shares: Sequence[Share],
    tail: tuple[float, float],
) -> Holding | None:
    try:
        run = store.get(job_id)
        spec = run.spec().spec
        earlier = history.of(run, now)
        limit = spec.time_limit_seconds
        window, _ = paces.release(run, events.of(run), limit, now, earlier, shares, tail)
    except (AviflowError, OSError, ValueError):
        return None  # gone or unreadable meanwhile: it holds nothing we can time
    return Holding(job_id, spec.queue, spec.total_gpus, window)


def _runs_for(
    run: RunDir, history: CellHistory, now: float, shares: Sequence[Share]
) -> tuple[float, float]:
    """How long the waiting job will hold its slots: its cell's earlier runs, else the part
    of its time limit recent runs held (``shares``), else its time limit
    (:func:`~aviflow.windows.run_window`)."""
    try:
        limit = run.spec().spec.time_limit_seconds
    except (AviflowError, OSError, ValueError):
        limit = None
    return run_window(limit, history.of(run, now), shares)


def forecast(
    store: RunStore,
    queued: Sequence[_admission.Waiting],
    held_ids: Sequence[str],
    quotas: Mapping[str, int],
    capacity: int,
    now: float,
    *,
    extra: Waiting | None = None,
    events: EventsCache | None = None,
    paces: PaceCache | None = None,
    history: CellHistory | None = None,
) -> tuple[dict[str, Estimate], dict[str, WaitNumbers]]:
    """The expected start and the wait's numbers of every job waiting in ``store``:
    ``queued`` and ``held_ids`` as :func:`~aviflow.backends.local.scan_queues` found them
    (and of ``extra``, a job not submitted yet, after them: a dry run). ``events``: the
    holding jobs' event logs as a caller that forecasts again and again keeps them (an
    unchanged one is not read again), ``paces`` their paces (:mod:`aviflow.pace`),
    ``history`` their cells' earlier runs (:mod:`aviflow.history`); None reads them afresh."""
    events, paces = events or EventsCache(), paces or PaceCache()
    history = history or CellHistory(store)
    shares = history.shares(now, live={*held_ids, *(q.id for q in queued)})
    tail = history.tail()
    held = (_holding(store, i, now, events, paces, history, shares, tail) for i in held_ids)
    holding = [h for h in held if h is not None]
    waiting: list[Waiting] = []
    for q in queued:
        try:
            runs_for = _runs_for(store.get(q.id), history, now, shares)
        except AviflowError:
            continue
        waiting.append(Waiting(q.id, q.queue, q.gpus, runs_for))
    if extra is not None:
        waiting.append(extra)
    names = {w.queue for w in waiting} | {h.queue for h in holding} | set(quotas)
    limits = [QueueLimits(q, quotas.get(q, capacity), strict=True) for q in sorted(names)]
    found = estimate(
        now, limits, holding, waiting, capacity=capacity, machine_fifo=True, assumed=ASSUMED
    )
    numbers = {}
    for job in waiting:
        n = wait_numbers(job, limits, holding, waiting)
        if n is not None:
            numbers[job.id] = n
    return found, numbers
