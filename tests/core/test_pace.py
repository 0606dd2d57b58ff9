"""A running job's pace (aviflow.pace) in the forecasts: the steps it logged toward a
declared total say when it releases its GPUs; what the job writes is believed only within
its attempt's admission and now."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from aviflow import pace
from aviflow.backends._admission import Waiting as Queued
from aviflow.backends._forecast import forecast
from aviflow.records import Event, EventType, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore

E = EventType


def job(gpus: int = 4, limit: str = "1h") -> TrainJob:
    spec = {"queue": "q", "gpusPerNode": gpus, "timeLimit": limit, "script": "1"}
    return TrainJob.from_dict({"metadata": {"name": "t"}, "spec": spec})


def holder(store: RunStore, admitted: float = 100.0) -> RunDir:
    run = store.create(job(), {}, "ada")
    run.append_events([Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", admitted)])
    return run


def rows(run: RunDir, *lines: dict[str, Any] | str) -> None:
    """Lines the job itself writes to its metrics file."""
    run.metrics_path.parent.mkdir(parents=True, exist_ok=True)
    with run.metrics_path.open("a") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")


def row(step: int, t: float, attempt: int = 1, **values: Any) -> dict[str, Any]:
    return MetricRow(step, t, attempt, {"loss": 1.0, **values}).to_dict()


def start(store: RunStore, held: RunDir, now: float, paces: pace.PaceCache) -> tuple[Any, Any]:
    waiting = store.create(job(), {}, "bob")
    found, _ = forecast(store, [Queued(waiting.id, "q", 4)], [held.id], {}, 4, now, paces=paces)
    return found[waiting.id].low, found[waiting.id].high


def test_a_holders_pace_toward_its_declared_total_times_its_release(tmp_path: Path) -> None:
    store, paces = RunStore(tmp_path), pace.PaceCache()
    held = holder(store)
    rows(held, row(10, 200.0, total_steps=110), row(60, 300.0))
    # 50 steps in 100 s, 50 left from the last row at 300: 100 s, within 20%
    assert start(store, held, 310.0, paces) == (380.0, 420.0)
    rows(held, row(85, 350.0))  # read from where the last look stopped: 25 left, 50 s
    assert start(store, held, 355.0, paces) == (390.0, 410.0)


def test_without_a_declared_total_the_time_limit_alone_bounds_it(tmp_path: Path) -> None:
    store, paces = RunStore(tmp_path), pace.PaceCache()
    held = holder(store)
    rows(held, row(10, 200.0), row(60, 300.0))
    assert start(store, held, 310.0, paces) == (310.0, 3700.0)


@pytest.mark.parametrize(
    "lines",
    [
        pytest.param([row(10, 200.0, total_steps=110), row(60, 9e9)], id="a row from the future"),
        pytest.param([row(10, 50.0, total_steps=110), row(60, 90.0)], id="rows before admission"),
        pytest.param([row(10, 200.0, 2, total_steps=110), row(60, 300.0, 2)], id="another attempt"),
        pytest.param([row(10, 200.0, total_steps="110"), row(60, 300.0)], id="a total as text"),
        pytest.param([row(10, 200.0, total_steps=True), row(60, 300.0)], id="a total as a bool"),
        pytest.param([row(10, 200.0, total_steps=110.5), row(60, 300.0)], id="a fractional total"),
        pytest.param([row(10, 200.0, total_steps=2**60), row(60, 300.0)], id="a huge total"),
        pytest.param([row(10, 200.0, total_steps=50), row(60, 300.0)], id="a total behind"),
        pytest.param([row(10, 200.0, total_steps=110), row(10, 300.0)], id="no steps taken"),
        pytest.param([row(10, 200.0, total_steps=110), '{"step": 60, "time": "x"}'], id="junk"),
    ],
)
def test_what_a_job_writes_is_believed_only_within_its_attempt(
    tmp_path: Path, lines: list[Any]
) -> None:
    store = RunStore(tmp_path)
    held = holder(store)
    rows(held, *lines)
    assert start(store, held, 310.0, pace.PaceCache()) == (310.0, 3700.0)  # its time limit


def test_a_pace_never_moves_a_release_past_the_time_limit(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    held = holder(store)
    rows(held, row(1, 200.0, total_steps=10**6), row(2, 300.0))  # 100 s a step: days
    assert start(store, held, 310.0, pace.PaceCache()) == (3700.0, 3700.0)


def test_a_symlinked_metrics_file_is_not_followed(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    held = holder(store)
    secret = tmp_path / "secret.jsonl"
    secret.write_text(
        json.dumps(row(10, 200.0, total_steps=110)) + "\n" + json.dumps(row(60, 300.0))
    )
    held.metrics_path.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(secret, held.metrics_path)
    assert start(store, held, 310.0, pace.PaceCache()) == (310.0, 3700.0)


def test_a_large_file_is_read_from_its_tail_then_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, paces = RunStore(tmp_path), pace.PaceCache()
    held = holder(store)
    rows(held, *[row(i, 90.0) for i in range(20_000)])  # far more than TAIL bytes
    rows(held, row(30_000, 200.0, total_steps=30_100), row(30_050, 300.0))
    size = held.metrics_path.stat().st_size
    assert size > 4 * pace.TAIL
    seen: list[int] = []
    real = pace.read_records

    def counted(path: Path, parse: Any, since: int = 0, **kw: Any) -> Any:
        seen.append(since)
        return real(path, parse, since, **kw)

    monkeypatch.setattr(pace, "read_records", counted)
    assert start(store, held, 310.0, paces) == (380.0, 420.0)
    assert seen == [size - pace.TAIL]  # the head, never
    rows(held, row(30_075, 350.0))
    assert start(store, held, 355.0, paces) == (390.0, 410.0)
    assert seen[1:] == [size]


def test_the_controllers_forecast_measures_how_long_fits_now_took() -> None:
    from aviflow.operator._forecast import DELAYS, AdmissionDelays

    d = AdmissionDelays()
    assert d.p90() == 0.0
    ids = [f"j{i}" for i in range(10)]
    d.told(ids, set(ids), now=100.0)
    d.told([], set(ids), now=105.0)  # still waiting: their first "now" stands
    for i, wait in enumerate([1.0] * 8 + [3.0, 9.0]):
        d.admitted(ids[i], 100.0 + wait)
    assert d.p90() == 3.0  # the 90th percentile of 10: the 9th smallest
    d.admitted("j0", 200.0)  # counted once
    d.admitted("never-told", 200.0)  # a job that waited for a release: not a "now"
    assert d.p90() == 3.0
    d.told(["gone"], {"gone"}, now=300.0)
    d.told([], set(), now=301.0)  # cancelled while it waited: forgotten
    d.admitted("gone", 400.0)
    assert d.p90() == 3.0
    for i in range(60):
        d.told([f"k{i}"], {f"k{i}"}, now=500.0)
        d.admitted(f"k{i}", 502.0)
    assert d.p90() == 2.0 and len(d._waits) == DELAYS  # the last 50 only
