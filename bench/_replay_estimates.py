"""The controller's estimator run on the ideal queue model's queues (pure; no cluster): how
far its expected starts can be from the realised ones on a replayed slice, and how much of
that comes from the run times it cannot know.

As each job arrives in :func:`_replay_model.simulate` and cannot start at once, the pool is
handed to :func:`aviflow.estimate.estimate` as the controller's forecast builds it: the
running jobs' releases by their pace once they have logged two rows (the replay's pods log
a step a second toward their hold, the first once half the attempt's start-up and release
``overhead`` has passed, the other half after the last step: :class:`aviflow.pace.Pace`),
before that by their time limit (:func:`_replay_trace.time_limit`); the waiting ones in their
queue's order, each holding its GPUs once started for the part of its time limit the newest
ended jobs with a limit like its own held (by submission, every job that ended so far, their
admitted time with each attempt's overhead, as the controller's
:meth:`aviflow.history.CellHistory.shares` counts the store's, and
:func:`aviflow.windows.like` picks), else up to its time limit (the trace's jobs have no
earlier runs of a cell).
``knows`` replaces the waiting jobs' run windows (``"queued"``), the running jobs'
releases (``"running"``) or both (``"all"``) with each job's true remaining hold, which no
forecast has: with both, what is left of the error comes from the queue rules
the estimator does not model (fair sharing's order, reclaim) and from jobs submitted
later; each alone says how much of the error the other part of the forecast carries. The
samples are rated as the replay rates its own (:func:`_replay_stats.estimate_errors`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from _replay_model import ModelJob, ReplayJob, simulate
from _replay_stats import Sample, estimate_errors, percentile
from _replay_trace import time_limit

from aviflow.estimate import Holding, QueueLimits, Waiting, estimate
from aviflow.history import SHARES
from aviflow.pace import Pace
from aviflow.windows import Share, release_window, run_window, spread

COHORT = "pool"
Knows = Literal["nothing", "queued", "running", "all"]


def _release(
    now: float,
    r: ModelJob,
    knows: bool,
    overhead: float,
    shares: Sequence[Share],
    tail: tuple[float, float] = (0.0, 0.0),
) -> tuple[float, float]:
    """When running job ``r`` releases its GPUs, as the forecast sees it at ``now`` (its
    true end, ``knows``; before its pace shows, by the ``shares`` of their limits the newest
    ended jobs held). Its attempt's ``overhead`` is half start-up (its pods log their first
    row that long after admission, then one a second) and half release (after its last
    step): what a pace cannot see, but ``tail`` (the ended jobs' release after their last
    row, as :meth:`aviflow.history.CellHistory.tail` measures it) adds."""
    assert r.started is not None
    if knows:
        end = r.started + r.hold
        return end, end
    limit = float(time_limit(r.job.hold))
    done_before = r.job.hold - r.left  # steps checkpointed by earlier attempts
    first = r.started + overhead / 2  # its first row
    rows = int(now - first) if now >= first else -1  # rows after the first
    pace = (
        Pace(
            r.attempt,
            (int(done_before), first),
            (int(done_before + rows), first + rows),
            r.job.hold,
        ).progress()
        if rows >= 0
        else None
    )
    window, _ = release_window(
        now, r.started, time_limit=limit, progress=pace, logged_at=first + max(0, rows),
        shares=shares, tail=tail,
    )  # fmt: skip
    return window


def samples(
    jobs: Sequence[ReplayJob],
    team_quotas: dict[str, int],
    shared: bool,
    overhead: float = 0.0,
    *,
    knows: Knows = "nothing",
) -> list[Sample]:
    """An estimate for each job that arrives and must wait, with its realised start."""
    knows_running, knows_queued = knows in ("running", "all"), knows in ("queued", "all")
    limits = [
        QueueLimits(t, q, cohort=COHORT, fair_weight=1.0) if shared else QueueLimits(t, q)
        for t, q in team_quotas.items()
    ]  # the shared pool has Kueue's fair sharing on, as the replay configures it
    taken: list[tuple[float, float, float | None, float | None, ModelJob]] = []

    def watch(
        now: float,
        job: ModelJob,
        running: Mapping[str, ModelJob],
        waiting: Mapping[str, list[ModelJob]],
        ended: Sequence[ModelJob],
    ) -> None:
        newest = sorted(ended, key=lambda r: (r.job.submit, r.job.name))[-SHARES:][::-1]
        shares = [  # admitted time over the limit, start-up and release included, as counted
            ((r.job.hold + overhead * r.attempt) / time_limit(r.job.hold), time_limit(r.job.hold))
            for r in newest
        ]  # by the controller's CellHistory.shares from the store's newest jobs, newest first
        tail = spread([overhead / 2] * len(newest))  # each ended after its last row so long
        holding = [
            Holding(
                r.job.name,
                r.job.team,
                r.job.gpus,
                _release(now, r, knows_running, overhead, shares, tail),
            )
            for r in running.values()
        ]
        ordered = sorted(
            (
                (pos, w.job.submit, w.job.name, w)
                for q in waiting.values()
                for pos, w in enumerate(q)
            ),
        )  # each queue's position, then submission: the controller's order
        queued = [
            Waiting(
                w.job.name, w.job.team, w.job.gpus,
                (w.left + overhead,) * 2 if knows_queued
                else run_window(float(time_limit(w.job.hold)), shares=shares),
            )
            for _, _, _, w in ordered
        ]  # fmt: skip
        est = estimate(now, limits, holding, queued)[job.job.name]
        if est.low is not None:
            taken.append((now, est.low, est.high, est.expected, job))

    simulate(jobs, team_quotas, shared, overhead, watch=watch)
    return [
        Sample(at, low, high, j.first, expected)
        for at, low, high, expected, j in taken
        if j.first is not None
    ]


def medians(found: Sequence[Sample], floor: float) -> tuple[float, float, float, int]:
    """The median error of the latest bound, of the middle of the range and of the expected
    start (as ``bench/replay.py`` prints them), and how many samples were rated."""
    high, _, _ = estimate_errors(found, floor, point="high")
    middle, _, _ = estimate_errors(found, floor)
    expected, _, _ = estimate_errors(found, floor, point="expected")
    return percentile(high, 0.5), percentile(middle, 0.5), percentile(expected, 0.5), len(high)


if __name__ == "__main__":  # its examples
    import doctest

    raise SystemExit(doctest.testmod().failed)
