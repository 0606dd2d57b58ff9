"""How long a job holds its GPUs, as the forecasts hand it to :mod:`aviflow.estimate`: a
running job's release window (:func:`release_window`: its pace, its cell's earlier runs, its
time limit) and a waiting job's run window once started (:func:`run_window`: its cell's
earlier runs, the share of their limits the pool's recent runs held, its time limit). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from aviflow.estimate import UNKNOWN

SHARES_NEEDED = 3  # the pool's finished runs needed before their shares say anything
SHARE_RANGE = (0.1, 0.9)  # the quantiles of those shares a waiting job's window spans


def run_window(
    time_limit: float | None = None,
    history: Sequence[float] = (),
    shares: Sequence[float] = (),
) -> tuple[float, float]:
    """How long a waiting job will hold its GPUs once started (its :class:`Waiting`'s
    ``runs_for``): between the shortest and the longest of ``history`` (the seconds the
    user's earlier runs of its cell held theirs); else, with a time limit and at least
    :data:`SHARES_NEEDED` ``shares`` (the part of their time limits the pool's recent
    successful runs held their GPUs, :meth:`aviflow.history.CellHistory.shares`), between
    their 10th and 90th percentiles of its limit (users' limits are loose, and the pool's
    own runs say how loose, as Tsafrir et al. predict run times from recent ones); else
    from no time to ``time_limit`` (:data:`UNKNOWN` without one); never past its time limit.

    >>> run_window(600.0), run_window(600.0, [300.0, 500.0]), run_window(400.0, [300.0, 500.0])
    ((0.0, 600.0), (300.0, 500.0), (300.0, 400.0))
    >>> run_window(600.0, shares=[0.5, 0.25, 1.0, 0.75]), run_window(600.0, shares=[0.5, 1.0])
    ((150.0, 600.0), (0.0, 600.0))
    >>> run_window(600.0, shares=[0.5, 0.25, 0.75])
    (150.0, 450.0)
    >>> run_window(None), run_window(None, shares=[0.5, 0.25, 1.0])
    ((0.0, inf), (0.0, inf))
    """
    cap = float(time_limit) if time_limit is not None else UNKNOWN
    if history:
        return min(min(history), cap), min(max(history), cap)
    if time_limit is not None and len(shares) >= SHARES_NEEDED:
        low, high = _spread(shares)
        return low * cap, high * cap
    return 0.0, cap


def _spread(shares: Sequence[float]) -> tuple[float, float]:
    """The :data:`SHARE_RANGE` quantiles of ``shares``, each taken within 0..1."""
    found = sorted(min(1.0, max(0.0, s)) for s in shares)
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
    shares: Sequence[float] = (),
) -> tuple[tuple[float, float], str]:
    """When a job that started at ``started`` releases its GPUs: ``(earliest, latest)`` in
    absolute seconds, and what that rests on. Its sources, best first:

    - ``progress``: ``(step, total_steps, seconds)``, the steps it logged toward a declared
      total in ``seconds`` of training: the rest at that pace, within 20%, from
      ``logged_at`` (when the last of those steps was logged; default ``now``);
    - ``history``: how long the user's earlier runs of the same cell held their GPUs: between
      the shortest and the longest of them from its start;
    - ``shares`` with ``time_limit``: the part of their time limits the pool's recent
      successful runs held (as :func:`run_window` takes them), of those that held theirs at
      least as long as this one has held its own so far, once :data:`SHARES_NEEDED` are
      left: between their 10th and 90th percentiles of its limit from its start;
    - ``time_limit`` (seconds): it ends by ``started + time_limit`` at the latest, and caps the
      others; alone, it may end at any moment before.

    Without any, the window has no end (:data:`UNKNOWN`). A window never starts before ``now``.

    >>> release_window(100.0, 0.0, time_limit=600.0, progress=(50, 100, 80.0))
    ((164.0, 196.0), 'its pace: 50 of 100 steps in 80s')
    >>> release_window(100.0, 0.0, progress=(50, 100, 80.0), logged_at=90.0)
    ((154.0, 186.0), 'its pace: 50 of 100 steps in 80s')
    >>> release_window(100.0, 0.0, history=[300.0, 500.0])
    ((300.0, 500.0), 'its cell ran 300s to 500s before (2 runs)')
    >>> release_window(100.0, 0.0)
    ((100.0, inf), 'no time limit, no progress, no earlier run')
    >>> window, why = release_window(100.0, 0.0, time_limit=600.0,
    ...                              shares=[0.1, 0.5, 0.25, 1.0, 0.75])
    >>> window
    (150.0, 600.0)
    >>> print(why)
    the pool's recent runs that held this long held 25% to 100% of their limits (4 runs)
    >>> release_window(500.0, 0.0, time_limit=600.0, shares=[0.1, 0.5, 0.25, 1.0, 0.75])
    ((500.0, 600.0), 'its time limit, 600s')
    """
    cap = started + time_limit if time_limit is not None else UNKNOWN
    if progress is not None and 0 < progress[0] < progress[1] and progress[2] > 0:
        step, total, seconds = progress
        rest = seconds * (total - step) / step
        base = now if logged_at is None else min(now, logged_at)
        low, high = base + 0.8 * rest, base + 1.2 * rest
        why = f"its pace: {step} of {total} steps in {seconds:g}s"
    elif history:
        low, high = started + min(history), started + max(history)
        why = f"its cell ran {min(history):g}s to {max(history):g}s before ({len(history)} runs)"
    elif (
        time_limit is not None
        and len(alive := [s for s in shares if s * time_limit >= now - started]) >= SHARES_NEEDED
    ):
        low_share, high_share = _spread(alive)
        low, high = started + low_share * time_limit, started + high_share * time_limit
        why = (
            f"the pool's recent runs that held this long held {low_share:.0%} to "
            f"{high_share:.0%} of their limits ({len(alive)} runs)"
        )
    elif time_limit is not None:
        return (now, max(now, cap)), f"its time limit, {time_limit:g}s"
    else:
        return (now, UNKNOWN), "no time limit, no progress, no earlier run"
    low, high = max(now, min(low, cap)), max(now, min(high, cap))
    return (low, high), why
