"""A running job's cell's earlier runs (aviflow.history) in the forecasts: the same user's
successful runs of the same notebook cell, submitted before it, say when it releases its
GPUs where it declares no pace; each earlier run's files are read once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aviflow.backends._admission import Waiting as Queued
from aviflow.backends._forecast import _runs_for, forecast
from aviflow.history import RECHECK, SHARES, CellHistory
from aviflow.operator._forecast import PoolForecast
from aviflow.pace import PaceCache
from aviflow.records import Event, EventType, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import EventsCache, RunDir, RunStore
from aviflow.windows import release_window

E = EventType
X = {"kind": "notebook-cell", "notebook": "work/train.ipynb", "cell_id": "cell-x"}


def job(limit: str = "1h") -> TrainJob:
    spec = {"queue": "q", "gpusPerNode": 4, "timeLimit": limit, "script": "1"}
    return TrainJob.from_dict({"metadata": {"name": "t"}, "spec": spec})


def earlier(
    store: RunStore, held: float, end: EventType = E.SUCCEEDED, user: str = "ada",
    origin: dict[str, Any] | None = None,
) -> RunDir:  # fmt: skip
    """A finished run that held its GPUs ``held`` seconds."""
    run = store.create(job(), {}, user, origin=X if origin is None else origin)
    run.append_events([
        Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", 10.0),
        Event(E.RUNNING, 1, "", 12.0), Event(end, 1, "", 10.0 + held),
    ])  # fmt: skip
    return run


def running(store: RunStore, origin: dict[str, Any] | None = None, user: str = "ada") -> RunDir:
    """A run of the cell holding its GPUs since 100."""
    run = store.create(job(), {}, user, origin=X if origin is None else origin)
    run.append_events([Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", 100.0)])
    return run


def release(run: RunDir, history: CellHistory, now: float = 310.0) -> tuple[Any, str]:
    events = run.events().items
    return PaceCache().release(run, events, 3600.0, now, history.of(run, now))


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter[tuple[str, str]]:
    """(job id, "meta" | "events") of every read of a job's meta or events."""
    counted: Counter[tuple[str, str]] = Counter()
    meta, events = RunDir.meta, RunDir.events

    def count_meta(self: RunDir) -> Any:
        counted[self.id, "meta"] += 1
        return meta(self)

    def count_events(self: RunDir, *a: Any, **kw: Any) -> Any:
        counted[self.id, "events"] += 1
        return events(self, *a, **kw)

    monkeypatch.setattr(RunDir, "meta", count_meta)
    monkeypatch.setattr(RunDir, "events", count_events)
    return counted


def test_the_same_users_successful_runs_of_the_cell_time_its_release(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 500.0)
    earlier(store, 50.0, E.FAILED)  # says nothing about a full run
    earlier(store, 40.0, E.CANCELLED)
    earlier(store, 60.0, origin={**X, "cell_id": "cell-y"})  # another cell
    earlier(store, 70.0, origin={**X, "notebook": "other.ipynb"})  # another notebook's
    earlier(store, 80.0, user="bob")  # another user's run of the cell
    mine = running(store)
    earlier(store, 90.0)  # submitted after it
    # it has held its GPUs since 100: it ends 300 s to 500 s after that
    assert release(mine, CellHistory(store)) == (
        (400.0, 600.0),
        "its cell ran 300s to 500s before (2 runs)",
    )


def test_the_newest_five_successful_runs_count(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    for held in (100.0, 200.0, 300.0, 400.0, 500.0, 600.0, 700.0):
        earlier(store, held)
    mine = running(store)
    assert CellHistory(store).of(mine, 310.0) == (700.0, 600.0, 500.0, 400.0, 300.0)
    assert release(mine, CellHistory(store))[1] == "its cell ran 300s to 700s before (5 runs)"


def test_only_the_stores_newest_jobs_are_looked_among(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 500.0)
    mine = running(store)
    assert CellHistory(store, look_back=2).of(mine, 310.0) == (500.0,)


@pytest.mark.parametrize(
    "origin",
    [
        pytest.param({"notebook": "work/train.ipynb"}, id="no cell id"),
        pytest.param({**X, "cell_id": ""}, id="an empty cell id"),
        pytest.param({**X, "cell_id": 7}, id="a cell id as a number"),
        pytest.param({**X, "cell_id": "c" * 8193}, id="a cell id too long"),
        pytest.param({**X, "notebook": ["work/train.ipynb"]}, id="a notebook as a list"),
    ],
)
def test_a_job_with_no_cell_id_has_no_history_and_reads_no_other_run(
    tmp_path: Path, reads: Counter[tuple[str, str]], origin: dict[str, Any]
) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0, origin=origin)
    mine = running(store, origin=origin)
    reads.clear()
    history = CellHistory(store)
    assert history.of(mine, 310.0) == ()
    assert history.of(mine, 310.0 + RECHECK) == ()
    assert reads == {(mine.id, "meta"): 1}
    assert release(mine, CellHistory(store)) == ((310.0, 3700.0), "its time limit, 3600s")


def test_its_pace_goes_before_its_cells_history(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    mine = running(store)
    mine.metrics_path.parent.mkdir(parents=True, exist_ok=True)
    rows = [MetricRow(10, 200.0, 1, {"total_steps": 110}), MetricRow(60, 300.0, 1, {})]
    mine.metrics_path.write_text("".join(json.dumps(r.to_dict()) + "\n" for r in rows))
    assert release(mine, CellHistory(store)) == (
        (380.0, 420.0),
        "its pace: 50 of 100 steps in 100s",
    )


def test_an_earlier_run_that_cannot_be_read_or_held_nothing_is_left_out(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 200.0).meta_path.write_text('{"id": ')  # a corrupt meta
    earlier(store, 250.0).events_path.unlink()  # no events: it never ended
    linked = earlier(store, 260.0)
    linked.events_path.unlink()
    linked.events_path.symlink_to(tmp_path / "elsewhere.jsonl")  # refused, not followed
    store.create(job(), {}, "ada", origin=X).append_events(
        [Event(E.QUEUED, 0, "", 0.0), Event(E.SUCCEEDED, 0, "", 5.0)]
    )  # it never held its GPUs: says nothing
    mine = running(store)
    assert CellHistory(store).of(mine, 310.0) == (300.0,)


def test_each_earlier_runs_files_are_read_once(
    tmp_path: Path, reads: Counter[tuple[str, str]]
) -> None:
    store = RunStore(tmp_path)
    a, b = earlier(store, 300.0), earlier(store, 500.0)
    other = earlier(store, 80.0, user="bob")
    first, second = running(store), running(store)
    reads.clear()
    history = CellHistory(store)
    assert history.of(first, 310.0) == (500.0, 300.0)
    assert history.of(second, 310.0) == (500.0, 300.0)  # first's run has not ended
    for _ in range(3):  # settled: never looked at again
        assert history.of(first, 310.0 + RECHECK) == (500.0, 300.0)
    # second waits on an earlier run that has not ended (first): it alone is looked at again
    assert history.of(second, 310.0 + RECHECK) == (500.0, 300.0)
    assert reads == {
        (a.id, "meta"): 1, (a.id, "events"): 1, (b.id, "meta"): 1, (b.id, "events"): 1,
        (other.id, "meta"): 1, (first.id, "meta"): 1, (second.id, "meta"): 1,
        (first.id, "events"): 2,
    }  # fmt: skip


def test_an_earlier_run_that_ends_later_counts_after_the_recheck(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    ahead = running(store)
    mine = running(store)
    history = CellHistory(store)
    assert history.of(mine, 310.0) == (300.0,)
    ahead.append_events([Event(E.SUCCEEDED, 1, "", 200.0)])
    assert history.of(mine, 310.0 + RECHECK - 1) == (300.0,)
    assert history.of(mine, 310.0 + RECHECK) == (100.0, 300.0)


def test_the_local_forecast_times_a_holder_by_its_cells_earlier_runs(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 500.0)
    held = running(store)
    waiting = store.create(job(), {}, "bob")
    found, _ = forecast(store, [Queued(waiting.id, "q", 4)], [held.id], {}, 4, 310.0)
    est = found[waiting.id]
    assert (est.low, est.high) == (400.0, 600.0)
    assert "cell's earlier successful runs" in est.assumed[0]


def test_the_controllers_forecast_times_a_holder_by_its_cells_earlier_runs(
    tmp_path: Path,
) -> None:
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 500.0)
    run = running(store)
    ctl = SimpleNamespace(events=EventsCache(), store=store)
    held = PoolForecast(ctl)._held(run, run.spec(), 310.0, ())  # type: ignore[arg-type]
    assert held == ((400.0, 600.0), 100.0)


def test_a_waiting_job_ahead_runs_as_long_as_its_cells_earlier_runs(tmp_path: Path) -> None:
    """Once started, the job ahead holds the machine between its cell's shortest and longest
    earlier run (within its time limit); one of no cell, from no time to its time limit."""
    store = RunStore(tmp_path)
    earlier(store, 300.0)
    earlier(store, 500.0)
    ahead = running(store)  # the same cell, queued (its STARTING event is not read here)
    other = store.create(job("30m"), {}, "cy")
    mine = store.create(job(), {}, "bob")
    queued = [Queued(ahead.id, "q", 4), Queued(other.id, "q", 4), Queued(mine.id, "q", 4)]
    found, _ = forecast(store, queued, [], {}, 4, 1000.0)
    assert (found[ahead.id].low, found[ahead.id].high) == (1000.0, 1000.0)
    assert (found[other.id].low, found[other.id].high) == (1300.0, 1500.0)
    assert (found[mine.id].low, found[mine.id].high) == (1300.0, 3300.0)


def finished(store: RunStore, held: float, limit: str = "1h", end: EventType = E.SUCCEEDED) -> None:
    """A run of no cell, by another user, that held its GPUs ``held`` seconds."""
    run = store.create(job(limit), {}, "cy", origin={})
    run.append_events([
        Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", 10.0),
        Event(end, 1, "", 10.0 + held),
    ])  # fmt: skip


def test_the_pools_newest_successful_runs_say_what_part_of_their_limit_they_held(
    tmp_path: Path,
) -> None:
    """Only runs that succeeded with a time limit count (newest first, at most SHARES), and
    the count is taken again after RECHECK seconds."""
    store = RunStore(tmp_path)
    finished(store, 1800.0, limit="2h")  # 0.25
    finished(store, 3000.0, end=E.FAILED)  # failed: says nothing
    finished(store, 7200.0)  # past its limit's hour (a late end): counts as all of it
    store.create(job(), {}, "cy")  # queued: not ended
    history = CellHistory(store)
    assert history.shares(0.0) == ((1.0, 3600.0), (0.25, 7200.0))
    for held in range(1, SHARES + 2):
        finished(store, 36.0 * held)
    assert history.shares(RECHECK - 1) == ((1.0, 3600.0), (0.25, 7200.0))
    newest = tuple(
        (min(1.0, 36.0 * held / 3600.0), 3600.0) for held in range(SHARES + 1, 1, -1)
    )  # the first of them, the oldest (0.01), is one too many
    assert history.shares(RECHECK) == newest


def test_a_waiting_job_of_no_cell_runs_for_the_part_of_its_limit_recent_runs_held(
    tmp_path: Path,
) -> None:
    """With three or more such runs, a waiting job with no earlier run of its cell holds the
    machine, once started, between their shares' 10th and 90th percentiles of its own time
    limit (here 0.25 and 0.75); with fewer, from no time to its limit."""
    store = RunStore(tmp_path)
    for held in (900.0, 1800.0, 2700.0):
        finished(store, held)
    other = store.create(job("30m"), {}, "cy")
    mine = store.create(job(), {}, "bob")
    queued = [Queued(other.id, "q", 4), Queued(mine.id, "q", 4)]
    found, _ = forecast(store, queued, [], {}, 4, 1000.0)
    assert (found[other.id].low, found[other.id].high) == (1000.0, 1000.0)
    assert (found[mine.id].low, found[mine.id].high) == (1450.0, 2350.0)
    assert "the part of their time limit" in found[mine.id].assumed[2]
    few = RunStore(tmp_path / "few")
    for held in (900.0, 1800.0):
        finished(few, held)
    other = few.create(job("30m"), {}, "cy")
    mine = few.create(job(), {}, "bob")
    found, _ = forecast(few, [Queued(other.id, "q", 4), Queued(mine.id, "q", 4)], [], {}, 4, 0.0)
    assert (found[mine.id].low, found[mine.id].high) == (0.0, 1800.0)


def test_only_runs_with_a_time_limit_like_a_jobs_say_what_part_of_it_the_job_holds(
    tmp_path: Path,
) -> None:
    """Three runs with hour limits held 1/4, 1/2 and 3/4 of them; three with 10-minute
    limits held all of theirs (short runs spend more of their limits starting). A waiting
    job with a 2-hour limit (twice an hour) is timed by the hour runs alone (30-90 min), one
    with a 20-minute limit by the 10-minute runs alone (all 20 min), one with a 3-hour limit
    (three hours: like none of them) from no time to its limit."""
    store = RunStore(tmp_path)
    for held in (900.0, 1800.0, 2700.0):
        finished(store, held)
    for _ in range(3):
        finished(store, 600.0, limit="10m")
    history = CellHistory(store)
    shares = history.shares(0.0)
    assert sorted(shares) == [(0.25, 3600.0), (0.5, 3600.0), (0.75, 3600.0)] + [(1.0, 600.0)] * 3
    for limit, window in (("2h", (1800.0, 5400.0)), ("20m", (1200.0, 1200.0)),
                          ("3h", (0.0, 10800.0))):  # fmt: skip
        waiting = store.create(job(limit), {}, "bob")
        assert _runs_for(waiting, history, 0.0, shares) == window


def test_the_pools_runs_say_how_long_they_held_their_gpus_after_their_last_row(
    tmp_path: Path,
) -> None:
    """Three successful runs logged their last rows 2, 4 and 9 s before they ended (each
    from 10 s); a fourth logged a row from an attempt it did not end with, a fifth none:
    neither counts. The tail is their 10th to 90th percentile (2-9 s), and a running job's
    pace window ends that much later (release_window, which both forecasts call); with
    fewer than three, none."""
    store = RunStore(tmp_path)
    assert CellHistory(store).tail() == (0.0, 0.0)
    for held, gap, attempt in ((900.0, 2.0, 1), (1800.0, 4.0, 1), (2700.0, 9.0, 1),
                               (600.0, 1.0, 2), (300.0, None, 1)):  # fmt: skip
        finished(store, held)
        if gap is not None:
            run = store.get(store.ids(newest=1)[0])
            rows = [
                {"step": 1, "time": 10.0 + held - gap - 1, "attempt": attempt, "values": {}},
                {"step": 2, "time": 10.0 + held - gap, "attempt": attempt, "values": {}},
            ]
            run.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    history = CellHistory(store)
    history.shares(0.0)
    assert history.tail() == (2.0, 9.0)
    window, _ = release_window(
        100.0, 0.0, time_limit=3600.0, progress=(50, 100, 80.0), tail=history.tail()
    )  # fmt: skip
    assert window == (166.0, 205.0)


def test_a_running_job_with_no_pace_and_no_cell_ends_as_recent_runs_that_held_as_long(
    tmp_path: Path,
) -> None:
    """Four runs held 1/4, 1/2, 3/4 and all of their hour. A job of no earlier cell run,
    holding the machine since 100 s with no pace, releases it between their shares' 10th
    and 90th percentiles of its own hour from its start (1000-3700 s) while three or more of
    them held theirs as long as it has held its own; at 2000 s only two did (1900 s held):
    by its time limit alone. Both forecasts say so."""
    store = RunStore(tmp_path)
    for held in (900.0, 1800.0, 2700.0, 3600.0):
        finished(store, held)
    run = running(store, origin={}, user="dee")
    waiting = store.create(job(), {}, "bob")
    for now, window in ((500.0, (1000.0, 3700.0)), (2000.0, (2000.0, 3700.0))):
        found, _ = forecast(store, [Queued(waiting.id, "q", 4)], [run.id], {}, 4, now)
        assert (found[waiting.id].low, found[waiting.id].high) == window
        history = CellHistory(store)
        shares = history.shares(now, live={run.id, waiting.id})
        ctl = SimpleNamespace(events=EventsCache(), store=store)
        held = PoolForecast(ctl)._held(run, run.spec(), now, shares)  # type: ignore[arg-type]
        assert held == (window, 100.0)
    assert (
        "a limit like theirs (half to twice) that held theirs as long"
        in (found[waiting.id].assumed[1])
    )
