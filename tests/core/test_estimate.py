"""The expected start of waiting jobs (aviflow.estimate): admission replayed forward, pure."""

from __future__ import annotations

from aviflow.estimate import (
    UNKNOWN,
    Estimate,
    Holding,
    QueueLimits,
    Waiting,
    cohort_lendable,
    estimate,
    wait_numbers,
)
from aviflow.windows import release_window


def starts(est: dict[str, Estimate]) -> dict[str, tuple[float | None, float | None]]:
    return {k: (e.low, e.high) for k, e in est.items()}


def test_a_queue_in_order_each_job_after_the_releases_ahead_of_it() -> None:
    pool = [QueueLimits("a", 8)]
    held = [Holding("r1", "a", 8, release=(100.0, 160.0))]
    waiting = [Waiting("w1", "a", 8, runs_for=(50.0, 80.0)), Waiting("w2", "a", 8)]
    assert starts(estimate(0.0, pool, held, waiting)) == {
        "w1": (100.0, 160.0),
        "w2": (150.0, 240.0),
    }


def test_the_expected_start_puts_every_job_ahead_at_the_middle_of_its_window() -> None:
    """w1 after r1's release (100-160 s: 130 expected); w2 after w1 has held its GPUs for
    the middle of its 50-80 s (65: 195 s), within 150-240 s; a job with no later bound has no
    expected start (w3, behind w2 whose run has no end), nor has one that never starts."""
    pool = [QueueLimits("a", 8)]
    held = [Holding("r1", "a", 8, release=(100.0, 160.0))]
    waiting = [
        Waiting("w1", "a", 8, runs_for=(50.0, 80.0)), Waiting("w2", "a", 8),
        Waiting("w3", "a", 8), Waiting("big", "a", 16),
    ]  # fmt: skip
    est = estimate(0.0, pool, held, waiting)
    assert {k: (e.low, e.expected, e.high) for k, e in est.items()} == {
        "w1": (100.0, 130.0, 160.0),
        "w2": (150.0, 195.0, 240.0),
        "w3": (150.0, None, None),
        "big": (None, None, None),
    }
    assert est["w1"].to_dict()["expected"] == 130.0 and "expected" not in est["w3"].to_dict()


def test_a_small_job_passes_a_head_that_does_not_fit_unless_the_queue_is_strict() -> None:
    held = [Holding("r1", "a", 4, release=(100.0, 100.0))]
    waiting = [
        Waiting("big", "a", 8, runs_for=(10.0, 10.0)),
        Waiting("small", "a", 4, runs_for=(10.0, 10.0)),
    ]
    est = estimate(0.0, [QueueLimits("a", 8)], held, waiting)
    assert starts(est) == {"big": (100.0, 100.0), "small": (0.0, 0.0)}
    assert est["small"].now and not est["big"].now
    strict = estimate(0.0, [QueueLimits("a", 8, strict=True)], held, waiting)
    assert starts(strict) == {"big": (100.0, 100.0), "small": (110.0, 110.0)}


def test_borrowing_from_the_cohort_within_the_limits() -> None:
    pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 4, cohort="c")]
    assert starts(estimate(0.0, pool, [], [Waiting("w", "a", 8)])) == {"w": (0.0, 0.0)}
    # b holds 2 of its own: a can borrow only 2 now, the rest when b's job ends
    held = [Holding("rb", "b", 2, release=(30.0, 60.0))]
    assert starts(estimate(0.0, pool, held, [Waiting("w", "a", 8)])) == {"w": (30.0, 60.0)}
    # a job no empty pool can hold says which limit forbids it
    limited = [QueueLimits("a", 4, cohort="c", borrowing_limit=2), pool[1]]
    never = estimate(0.0, limited, [], [Waiting("w", "a", 8)])["w"]
    assert (never.low, never.high) == (None, None)
    assert never.never == (
        "needs 8 GPUs; queue 'a' may hold at most 6 (its quota, 4, plus at most 2 borrowed "
        "(borrowing limit 2))"
    )
    lending = [pool[0], QueueLimits("b", 4, cohort="c", lending_limit=1)]
    assert estimate(0.0, lending, [], [Waiting("w", "a", 8)])["w"].never == (
        "needs 8 GPUs; queue 'a' may hold at most 5 (its quota, 4, plus at most 1 borrowed "
        "(1 lendable in cohort 'c'))"
    )
    assert estimate(0.0, pool, [], [Waiting("w", "x", 1)])["w"].never == "queue 'x' does not exist"


def test_a_job_within_its_quota_reclaims_what_others_borrowed() -> None:
    pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 4, cohort="c")]
    held = [Holding("ra", "a", 8, release=(500.0, 900.0))]  # a borrowed all of b's quota
    waiting = [Waiting("wb", "b", 4)]
    assert starts(estimate(0.0, pool, held, waiting)) == {"wb": (0.0, 0.0)}
    assert starts(estimate(0.0, pool, held, waiting, reclaim=False)) == {"wb": (500.0, 900.0)}


def test_each_queue_reclaims_by_its_own_setting_not_the_pools() -> None:
    """Kueue's ``reclaimWithinCohort`` is each ClusterQueue's: a queue that reclaims takes its
    quota back at once even where another queue (of its cohort, or of none) does not, and
    one that does not waits for the borrower's release, whatever the pool-wide default."""
    pool = [
        QueueLimits("a", 4, cohort="c", reclaim=False),
        QueueLimits("b", 4, cohort="c", reclaim=True),
        QueueLimits("d", 4, cohort="c", reclaim=False),
        QueueLimits("solo", 8, reclaim=False),  # no cohort: its setting is moot
    ]
    held = [Holding("ra", "a", 12, release=(500.0, 900.0))]  # a borrowed b's and d's quotas
    waiting = [Waiting("wb", "b", 4), Waiting("wd", "d", 4, runs_for=(10.0, 10.0))]
    for default in (True, False):
        assert starts(estimate(0.0, pool, held, waiting, reclaim=default)) == {
            "wb": (0.0, 0.0),
            "wd": (500.0, 900.0),
        }


def test_jobs_that_need_no_borrowing_go_first_then_the_oldest() -> None:
    pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 4, cohort="c")]
    held = [Holding("r", "a", 4, release=(10.0, 10.0)), Holding("s", "b", 4, release=(10.0, 10.0))]
    waiting = [
        Waiting("a-borrows", "a", 8, runs_for=(5.0, 5.0)),
        Waiting("b-own", "b", 4, runs_for=(5.0, 5.0)),
    ]
    # at 10 both fit, not together: b-own, within its quota, goes before the older job that
    # would borrow; that one follows when b-own ends
    assert starts(estimate(0.0, pool, held, waiting, reclaim=False)) == {
        "a-borrows": (15.0, 15.0),
        "b-own": (10.0, 10.0),
    }


def test_with_fair_sharing_the_borrower_whose_share_stays_lowest_goes_first() -> None:
    """Kueue's fair sharing ranks borrowers by their queue's share once admitted (GPUs
    borrowed per thousand lendable in the cohort, over its weight), not by age: at 10, w1
    would take a's borrowing to 4 of the cohort's 8 (500), w2 b's to 2 (250). Without fair
    sharing (no weight) the older w1 goes first; with b's weight a quarter of a's, w1."""
    held = [Holding("x", "a", 2, release=(100.0, 100.0)), Holding("y", "b", 4, (10.0, 10.0))]
    waiting = [Waiting("w1", "a", 6, (50.0, 50.0)), Waiting("w2", "b", 6, (50.0, 50.0))]

    def pool(wa: float | None, wb: float | None) -> list[QueueLimits]:
        return [QueueLimits("a", 4, "c", fair_weight=wa), QueueLimits("b", 4, "c", fair_weight=wb)]

    fair = estimate(0.0, pool(1.0, 1.0), held, waiting, reclaim=False)
    assert starts(fair) == {"w1": (60.0, 60.0), "w2": (10.0, 10.0)}  # w1 once w2 ends
    assert starts(estimate(0.0, pool(None, None), held, waiting, reclaim=False)) == {
        "w1": (10.0, 10.0), "w2": (60.0, 60.0),
    }  # fmt: skip
    light = estimate(0.0, pool(1.0, 0.25), held, waiting, reclaim=False)  # 500 vs 1000
    assert starts(light) == {"w1": (10.0, 10.0), "w2": (60.0, 60.0)}


def test_the_machine_bounds_the_local_queues() -> None:
    pool = [QueueLimits("a", 8), QueueLimits("b", 8)]
    held = [Holding("r", "a", 6, release=(40.0, 70.0))]
    est = estimate(0.0, pool, held, [Waiting("w", "b", 4)], capacity=8)
    assert starts(est) == {"w": (40.0, 70.0)}
    assert estimate(0.0, pool, [], [Waiting("w", "b", 9)], capacity=8)["w"].never == (
        "needs 9 GPUs; the pool has 8"
    )


def test_a_job_submitted_later_within_its_quota_passes_a_waiting_borrower() -> None:
    """Known to arrive at 5, b's job needs no borrowing: it takes the GPUs b's running job
    frees at 10 before a's borrower, which then waits for it (until 30)."""
    pool = [QueueLimits("a", 4, "c"), QueueLimits("b", 4, "c")]
    held = [Holding("r1", "a", 4, release=(100.0, 100.0)),
            Holding("r2", "b", 4, release=(10.0, 10.0))]  # fmt: skip
    w = [Waiting("w", "a", 4, runs_for=(5.0, 5.0))]
    assert estimate(0.0, pool, held, w)["w"].expected == 10.0
    later = [(5.0, Waiting("x", "b", 4, runs_for=(20.0, 20.0)))]
    est = estimate(0.0, pool, held, w, arriving=later)["w"]
    assert (est.low, est.expected, est.high) == (30.0, 30.0, 30.0)
    assert "the jobs submitted later as given" in est.assumed[0]


def test_each_release_a_job_waits_for_adds_the_queues_requeue_lag() -> None:
    """Kueue admits what a release lets in up to a second later (its requeue batch): the
    first job waits one release (10-11 s, about 10.5), the second two, the lag counted
    after each (15-17 s, about 16); a job that fits now does not wait for a release, and a
    release with no known end stays open above."""
    held = [Holding("r", "a", 8, release=(10.0, 10.0))]
    waiting = [Waiting("w1", "a", 8, runs_for=(5.0, 5.0)), Waiting("w2", "a", 8, (5.0, 5.0))]
    found = estimate(0.0, [QueueLimits("a", 8)], held, waiting, requeue=1.0)
    assert [(e.low, e.expected, e.high) for e in found.values()] == [
        (10.0, 10.5, 11.0),
        (15.0, 16.0, 17.0),
    ]
    now = estimate(0.0, [QueueLimits("a", 16)], held, waiting[:1], requeue=1.0)["w1"]
    assert (now.low, now.high, now.now) == (0.0, 0.0, True)
    held = [Holding("r", "a", 8, release=(10.0, UNKNOWN))]
    est = estimate(0.0, [QueueLimits("a", 8)], held, waiting[:1], requeue=1.0)["w1"]
    assert (est.low, est.expected, est.high) == (10.0, None, None)


def test_a_release_with_no_known_end_leaves_the_estimate_open_above() -> None:
    held = [Holding("r", "a", 8, release=(0.0, UNKNOWN))]
    est = estimate(0.0, [QueueLimits("a", 8)], held, [Waiting("w", "a", 8)], assumed=["x"])["w"]
    assert (est.low, est.high, est.never) == (0.0, None, None)
    assert est.assumed[0] == "x" and not est.now


def test_the_release_window_of_a_running_job() -> None:
    # its pace, capped by its time limit
    assert release_window(100.0, 0.0, time_limit=150.0, progress=(50, 100, 80.0)) == (
        (150.0, 150.0),
        "its pace: 50 of 100 steps in 80s",
    )
    # its time limit alone: any moment until then; past it (ending now): now
    assert release_window(100.0, 0.0, time_limit=600.0) == ((100.0, 600.0), "its time limit, 600s")
    assert release_window(700.0, 0.0, time_limit=600.0)[0] == (700.0, 700.0)
    # earlier runs of its cell, never before now
    assert release_window(400.0, 0.0, history=[300.0, 500.0])[0] == (400.0, 500.0)
    # progress that says nothing (no step yet, or past its total) falls back
    assert release_window(100.0, 0.0, progress=(0, 100, 5.0))[1] == (
        "no time limit, no progress, no earlier run"
    )


def test_on_the_local_machine_the_next_job_waits_for_room_and_holds_back_the_rest() -> None:
    pool = [QueueLimits("a", 8, strict=True), QueueLimits("b", 8, strict=True)]
    held = [Holding("r", "a", 6, release=(40.0, 70.0))]
    waiting = [Waiting("b4", "b", 4, runs_for=(5.0, 5.0)), Waiting("a2", "a", 2)]
    # Kueue would start a2 now (it fits); the local backend keeps the order on the machine
    assert starts(estimate(0.0, pool, held, waiting, capacity=8))["a2"] == (0.0, 0.0)
    local = estimate(0.0, pool, held, waiting, capacity=8, machine_fifo=True)
    assert starts(local) == {"b4": (40.0, 70.0), "a2": (40.0, 70.0)}


def test_an_estimate_crosses_the_wire_and_a_malformed_one_is_dropped() -> None:
    from aviflow.estimate import WaitNumbers
    from aviflow.records import JobStatus

    est = Estimate("w", 10.0, None, None, ("x",))
    wait = WaitNumbers("a", 8, 8, 0, 0, 1, 4)
    status = JobStatus(queue_position=2, expected_start=est, wait=wait)
    wire = status.to_dict()
    assert wire["expectedStart"] == {
        "low": 10.0,
        "high": None,
        "window": "01-01T00:00Z..",
        "assumed": ["x"],
    }
    assert wire["wait"] == {"queue": "a", "quota": 8, "holds": 8, "borrowed": 0,
                            "lendable": 0, "ahead": 1, "aheadGpus": 4}  # fmt: skip
    back = JobStatus.from_dict(wire)
    assert back.wait == wait and back.expected_start == Estimate("", 10.0, None, None, ("x",))
    # what a job could have written in its status file: no estimate rather than a wrong one
    for bad in ({"low": "soon"}, {"low": float("nan"), "high": None}, {"low": -1, "high": 2},
                {"low": 1, "high": 2, "assumed": "x"}, [1, 2], {"low": True, "high": None},
                {"low": 1e300, "high": None}, {"low": 1, "high": float("inf")}):  # fmt: skip
        assert JobStatus.from_dict({"state": "QUEUED", "expectedStart": bad}).expected_start is None
    # the latest time a date can show still reads and writes (the ``window`` column)
    last = JobStatus.from_dict({"expectedStart": {"low": 253402300000, "high": None}})
    assert last.expected_start is not None
    assert last.to_dict()["expectedStart"]["window"] == "12-31T23:47Z.."
    assert JobStatus.from_dict({"wait": {**wire["wait"], "ahead": -1}}).wait is None
    assert JobStatus.from_dict({"wait": {**wire["wait"], "quota": 1e30}}).wait is None


def test_what_the_cohort_lends_a_queue_now() -> None:
    pool = [
        QueueLimits("a", 4, cohort="c"),
        QueueLimits("b", 8, cohort="c", lending_limit=4),  # keeps 4 for itself
        QueueLimits("d", 2, cohort="c", lending_limit=0),  # lends nothing
        QueueLimits("solo", 16),
    ]
    # b lends 4 (it uses 2 of the 4 it keeps), a lends its 4 idle: a may borrow b's 4
    assert cohort_lendable("a", pool, {"b": 2}) == 4
    # b may borrow a's 4 idle, and not its own lendable part
    assert cohort_lendable("b", pool, {"b": 2}) == 4
    # b uses 6: 2 of its lendable part; a borrows 1 more beyond its 4
    assert cohort_lendable("a", pool, {"a": 5, "b": 6}) == 1
    assert cohort_lendable("b", pool, {"a": 5, "b": 6}) == 0
    assert cohort_lendable("d", pool, {}) == 8
    assert cohort_lendable("solo", pool, {}) == 0
    assert cohort_lendable("missing", pool, {}) == 0


def test_the_wait_numbers_name_the_same_lendable_gpus() -> None:
    pool = [QueueLimits("a", 4, cohort="c"), QueueLimits("b", 8, cohort="c", lending_limit=4)]
    held = [Holding("x", "b", 2, (0.0, 9.0))]
    numbers = wait_numbers(Waiting("w", "b", 8), pool, held, [Waiting("w", "b", 8)])
    assert numbers is not None and numbers.lendable == cohort_lendable("b", pool, {"b": 2}) == 4
