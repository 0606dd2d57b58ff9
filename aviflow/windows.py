"""How long a job holds its GPUs, as the forecasts hand it to :mod:`aviflow.estimate`: a
running job's release window (:func:`release_window`: its pace, its cell's earlier runs, its
time limit) and a waiting job's run window once started (:func:`run_window`: its cell's
earlier runs, the share of their limits the pool's recent runs like it held, its time limit).
Pure.

A run is *like* a job when their time limits are within a factor :data:`SIMILAR` of each
other: the share of its limit a run holds depends on how long it is (a limit carries room
for start-up and slow steps that a short job spends a larger part of, and a user who asks
for an hour and one who asks for a day pad differently), so a short job's shares say little
about a long one's.
"""

from __future__ import annotations

from collections.abc import Sequence

from aviflow.estimate import UNKNOWN

SHARES_NEEDED = 3  # the pool's finished runs like a job needed before their shares say anything
SHARES_USED = 10  # the newest of them whose shares its window spans
SIMILAR = 2.0  # a run is like a job when their time limits are within this factor
SHARE_RANGE = (0.1, 0.9)  # the quantiles of those shares a window spans
Share = tuple[float, float]  # a finished run's: the part of its time limit it held, the limit (s)


def like(shares: Sequence[Share], time_limit: float) -> list[float]:
    """The shares of the runs among ``shares`` (newest first) whose time limits are within a
    factor :data:`SIMILAR` of ``time_limit``, newest first.

    >>> like([(0.5, 600.0), (0.9, 3600.0), (0.25, 1200.0), (0.75, 300.0)], 600.0)
    [0.5, 0.25, 0.75]
    """
    return [s for s, limit in shares if time_limit / SIMILAR <= limit <= time_limit * SIMILAR]


def run_window(
    time_limit: float | None = None,
    history: Sequence[float] = (),
    shares: Sequence[Share] = (),
) -> tuple[float, float]:
    """How long a waiting job will hold its GPUs once started (its :class:`Waiting`'s
    ``runs_for``): between the shortest and the longest of ``history`` (the seconds the
    user's earlier runs of its cell held theirs); else, with a time limit and at least
    :data:`SHARES_NEEDED` runs :func:`like` it among ``shares`` (the part of their time
    limits the pool's recent successful runs held their GPUs, with those limits, newest
    first: :meth:`aviflow.history.CellHistory.shares`), between the 10th and 90th
    percentiles of the newest :data:`SHARES_USED` of their shares, of its limit (users'
    limits are loose, and the pool's own runs say how loose, as Tsafrir et al. predict run
    times from recent ones); else from no time to ``time_limit`` (:data:`UNKNOWN` without
    one); never past its time limit.

    >>> run_window(600.0), run_window(600.0, [300.0, 500.0]), run_window(400.0, [300.0, 500.0])
    ((0.0, 600.0), (300.0, 500.0), (300.0, 400.0))
    >>> hour = [(0.5, 3600.0), (0.25, 3600.0), (0.75, 7200.0), (1.0, 900.0)]
    >>> run_window(3600.0, shares=hour), run_window(3600.0, shares=hour[:2])
    ((900.0, 2700.0), (0.0, 3600.0))
    >>> run_window(600.0, shares=hour)  # only the 15-minute run is like it
    (0.0, 600.0)
    >>> run_window(None), run_window(None, shares=hour)
    ((0.0, inf), (0.0, inf))
    """
    cap = float(time_limit) if time_limit is not None else UNKNOWN
    if history:
        return min(min(history), cap), min(max(history), cap)
    found = like(shares, time_limit)[:SHARES_USED] if time_limit is not None else []
    if time_limit is not None and len(found) >= SHARES_NEEDED:
        low, high = _spread(found)
        return low * cap, high * cap
    return 0.0, cap


def _spread(shares: Sequence[float]) -> tuple[float, float]:
    """The :data:`SHARE_RANGE` quantiles of ``shares``, each taken within 0..1."""
    return _quantiles([min(1.0, max(0.0, s)) for s in shares])


def _quantiles(values: Sequence[float]) -> tuple[float, float]:
    """The :data:`SHARE_RANGE` quantiles of ``values`` (not empty)."""
    found = sorted(values)
    low, high = (found[round(q * (len(found) - 1))] for q in SHARE_RANGE)
    return low, high


def release_window(
    now: float,
    started: float,
    *,
    time_limit: float | None = None,
    progress: tuple[int, int, float] | None = None,
    logged_at: float | None = None,
    history: Sequence[float] = (),
    shares: Sequence[Share] = (),
    tail: tuple[float, float] = (0.0, 0.0),
) -> tuple[tuple[float, float], str]:
    """When a job that started at ``started`` releases its GPUs: ``(earliest, latest)`` in
    absolute seconds, and what that rests on. Its sources, best first:

    - ``progress``: ``(step, total_steps, seconds)``, the steps it logged toward a declared
      total in ``seconds`` of training: the rest at that pace, within 20%, from
      ``logged_at`` (when the last of those steps was logged; default ``now``), then
      ``tail`` (the seconds the pool's recent runs held their GPUs after their last row,
      :meth:`aviflow.history.CellHistory.tail`: its pods exiting, its Job completing);
    - ``history``: how long the user's earlier runs of the same cell held their GPUs: between
      the shortest and the longest of them from its start;
    - ``shares`` with ``time_limit``: the part of their time limits the pool's recent
      successful runs held (as :func:`run_window` takes them), of the newest
      :data:`SHARES_USED` runs :func:`like` it that held theirs at least as long as this
      one has held its own so far, once :data:`SHARES_NEEDED` are found: between their
      10th and 90th percentiles of its limit from its start;
    - ``time_limit`` (seconds): it ends by ``started + time_limit`` at the latest, and caps the
      others; alone, it may end at any moment before.

    Without any, the window has no end (:data:`UNKNOWN`). A window never starts before ``now``.

    >>> release_window(100.0, 0.0, time_limit=600.0, progress=(50, 100, 80.0))
    ((164.0, 196.0), 'its pace: 50 of 100 steps in 80s')
    >>> release_window(100.0, 0.0, progress=(50, 100, 80.0), logged_at=90.0)
    ((154.0, 186.0), 'its pace: 50 of 100 steps in 80s')
    >>> release_window(100.0, 0.0, progress=(50, 100, 80.0), tail=(2.0, 9.0))[0]
    (166.0, 205.0)
    >>> release_window(100.0, 0.0, history=[300.0, 500.0])
    ((300.0, 500.0), 'its cell ran 300s to 500s before (2 runs)')
    >>> release_window(100.0, 0.0)
    ((100.0, inf), 'no time limit, no progress, no earlier run')
    >>> runs = [(0.1, 600.0), (0.5, 600.0), (0.25, 900.0), (1.0, 600.0), (0.75, 300.0)]
    >>> window, why = release_window(100.0, 0.0, time_limit=600.0, shares=runs)
    >>> window
    (150.0, 600.0)
    >>> print(why)
    the pool's recent runs like it that held this long held 25% to 100% of their limits (4 runs)
    >>> release_window(500.0, 0.0, time_limit=600.0, shares=runs)
    ((500.0, 600.0), 'its time limit, 600s')
    """
    cap = started + time_limit if time_limit is not None else UNKNOWN
    if progress is not None and 0 < progress[0] < progress[1] and progress[2] > 0:
        step, total, seconds = progress
        rest = seconds * (total - step) / step
        base = now if logged_at is None else min(now, logged_at)
        low, high = base + 0.8 * rest + tail[0], base + 1.2 * rest + tail[1]
        why = f"its pace: {step} of {total} steps in {seconds:g}s"
    elif history:
        low, high = started + min(history), started + max(history)
        why = f"its cell ran {min(history):g}s to {max(history):g}s before ({len(history)} runs)"
    elif (
        time_limit is not None
        and len(alive := _held_as_long(shares, time_limit, now - started)) >= SHARES_NEEDED
    ):
        low_share, high_share = _spread(alive)
        low, high = started + low_share * time_limit, started + high_share * time_limit
        why = (
            f"the pool's recent runs like it that held this long held {low_share:.0%} to "
            f"{high_share:.0%} of their limits ({len(alive)} runs)"
        )
    elif time_limit is not None:
        return (now, max(now, cap)), f"its time limit, {time_limit:g}s"
    else:
        return (now, UNKNOWN), "no time limit, no progress, no earlier run"
    low, high = max(now, min(low, cap)), max(now, min(high, cap))
    return (low, high), why


def _held_as_long(shares: Sequence[Share], time_limit: float, held: float) -> list[float]:
    """The newest :data:`SHARES_USED` shares of runs :func:`like` a job with ``time_limit``
    that would have held it at least ``held`` seconds."""
    return [s for s in like(shares, time_limit) if s * time_limit >= held][:SHARES_USED]


def spread(seconds: Sequence[float]) -> tuple[float, float]:
    """The :data:`SHARE_RANGE` quantiles of the newest :data:`SHARES_USED` of ``seconds``
    (newest first), once :data:`SHARES_NEEDED` are there; else ``(0, 0)``.

    >>> spread([1.0, 9.0, 2.0, 3.0]), spread([1.0, 9.0])
    ((1.0, 9.0), (0.0, 0.0))
    """
    found = [max(0.0, s) for s in seconds[:SHARES_USED]]
    return _quantiles(found) if len(found) >= SHARES_NEEDED else (0.0, 0.0)
