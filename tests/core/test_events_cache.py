"""Event logs read once, then only as they grow (:class:`aviflow.store.EventsCache`): the
controller's reconciles and forecast and the local supervisor's forecast share it, so a tick
does not read an unchanged events file again (reads counted on a real run store)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from aviflow.backends._admission import Waiting as Queued
from aviflow.backends._forecast import forecast
from aviflow.paging import Batch
from aviflow.records import Event, EventType
from aviflow.spec import TrainJob
from aviflow.store import EventsCache, RunDir, RunStore

E = EventType


def job(gpus: int = 2) -> TrainJob:
    spec = {"queue": "q", "gpusPerNode": gpus, "timeLimit": "1h", "script": "1"}
    return TrainJob.from_dict({"metadata": {"name": "t"}, "spec": spec})


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every page read of an events file: (job id, cursor)."""
    seen: list[tuple[str, int]] = []
    real = RunDir.events

    def counted(self: RunDir, since: int = 0, **kw: object) -> Batch[Event]:
        seen.append((self.id, since))
        return real(self, since, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(RunDir, "events", counted)
    return seen


def test_an_unchanged_log_is_not_read_again_and_a_grown_one_only_from_its_cursor(
    tmp_path: Path, reads: list[tuple[str, int]]
) -> None:
    run = RunStore(tmp_path).create(job(), {}, "ada")
    cache = EventsCache()
    assert cache.of(run) == () and reads == [(run.id, 0)]  # no file yet
    assert cache.of(run) == () and len(reads) == 1
    first = [Event(E.QUEUED, 0, "waiting", 1.0), Event(E.STARTING, 1, "starting", 2.0)]
    run.append_events(first)
    assert cache.of(run) == tuple(first) and reads[1:] == [(run.id, 0)]
    cursor = run.events_path.stat().st_size
    for _ in range(3):
        assert cache.of(run) == tuple(first)
    assert len(reads) == 2  # three ticks, no read
    running = Event(E.RUNNING, 1, "running", 3.0)
    run.append_events([running])
    assert cache.of(run) == (*first, running) and reads[2:] == [(run.id, cursor)]
    # replaced (another inode) or shrunk below the cursor: read from the start again
    (tmp_path / "copy").write_bytes(run.events_path.read_bytes())
    os.replace(tmp_path / "copy", run.events_path)
    assert cache.of(run) == (*first, running) and reads[3:] == [(run.id, 0)]
    with run.events_path.open("r+b") as f:
        f.truncate(cursor)
    assert cache.of(run) == tuple(first) and reads[4:] == [(run.id, 0)]


def test_a_cache_keeps_at_most_its_jobs_logs(tmp_path: Path, reads: list[tuple[str, int]]) -> None:
    store, cache = RunStore(tmp_path), EventsCache(jobs=2)
    runs = [store.create(job(), {}, "ada") for _ in range(3)]
    for run in runs:
        run.append_events([Event(E.QUEUED, 0, "waiting", 1.0)])
        cache.of(run)
    cache.of(runs[2])  # kept
    cache.of(runs[0])  # dropped as the least recently read: read again
    assert reads == [(r.id, 0) for r in runs] + [(runs[0].id, 0)]


def test_the_supervisors_forecast_reads_a_holding_jobs_events_only_when_they_changed(
    tmp_path: Path, reads: list[tuple[str, int]]
) -> None:
    store = RunStore(tmp_path)
    held = store.create(job(4), {}, "ada")
    held.append_events([Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", 100.0)])
    waiting = store.create(job(4), {}, "bob")
    queued = [Queued(waiting.id, "q", 4)]
    cache = EventsCache()

    def start(now: float) -> float | None:
        found, _ = forecast(store, queued, [held.id], {}, 4, now, events=cache)
        return found[waiting.id].high

    assert start(1000.0) == 3700.0  # at the latest when the holder's hour ends
    assert start(1005.0) == 3700.0 and reads == [(held.id, 0)]  # the next tick reads nothing
    cursor = held.events_path.stat().st_size
    held.append_events([Event(E.EVICTED, 1, "", 1010.0), Event(E.STARTING, 2, "", 1900.0)])
    # attempt 1 held it 910 s of the hour: attempt 2 ends by 1900 + 2690
    assert start(2000.0) == 4590.0 and reads[1:] == [(held.id, cursor)]
    assert start(2005.0) == 4590.0 and len(reads) == 2


def test_the_controllers_forecast_reads_what_its_reconciles_read(
    tmp_path: Path, reads: list[tuple[str, int]]
) -> None:
    """The controller keeps one cache (``Controller.events``) for its reconciles and its
    forecast: the forecast's look at a running job that a reconcile read costs no read."""
    from types import SimpleNamespace

    from aviflow.operator._forecast import PoolForecast

    store = RunStore(tmp_path)
    run = store.create(job(), {}, "ada")
    run.append_events([Event(E.QUEUED, 0, "", 0.0), Event(E.STARTING, 1, "", 100.0)])
    ctl = SimpleNamespace(events=EventsCache(), store=store)
    ctl.events.of(run)  # the reconcile
    held = PoolForecast(ctl)._held(run, run.spec(), 1000.0, ())  # type: ignore[arg-type]
    assert held == ((1000.0, 3700.0), 100.0)
    assert reads == [(run.id, 0)]
