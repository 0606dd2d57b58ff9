"""The usage ledger on SQLite and on a real PostgreSQL: totals equal the event logs, to the
second, across service restarts, restarts and preemptions; reports are golden."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.spec import TrainJob
from aviflow.status import RESTARTING, Event, usage_from_events
from aviflow.store import RunDir, RunStore
from aviflow_hub.ledger import Ledger
from aviflow_hub.ledger.attempts import AttemptRecord
from aviflow_hub.ledger.reports import to_csv, usage_report

T0 = 1_767_225_000.0  # 2025-12-31 23:50:00 UTC (midnight is T0 + 600): attempts cross midnight and the ISO week


class StoreOnly(Backend):
    """Reads a run store whose event logs the test writes by hand (no processes)."""

    name = "store-only"

    def __init__(self, root: Path) -> None:
        self.store = RunStore(root)

    def submit(self, job: TrainJob, bundle: CodeBundle) -> str:
        raise NotImplementedError

    def status(self, job_id: str) -> dict[str, Any]:
        return self.store.get(job_id).status()

    def cancel(self, job_id: str) -> bool:
        raise NotImplementedError

    def list_ids(self) -> list[str]:
        return self.store.ids()

    def run_dir(self, job_id: str) -> RunDir:
        return self.store.get(job_id)


def make_job(store: RunStore, name: str, user: str, team: str, nodes: int, gpus: int) -> RunDir:
    job = TrainJob.from_dict({"apiVersion": "aviflow.dev/v1", "kind": "TrainJob", "metadata": {"name": name},
                              "spec": {"script": "pass", "nodes": nodes, "gpusPerNode": gpus,
                                       "queue": f"q-{team}"}})
    run = store.create(job, {}, {"user": "service", "origin": {"hub": {"user": user, "team": team}}})
    meta = run.meta()
    meta["submitted"] = T0
    run.write_meta(meta)
    return run


def emit(run: RunDir, *events: tuple[str, int, float, dict[str, Any]]) -> None:
    for kind, attempt, dt, data in events:
        run.record(Event(kind, attempt=attempt, time=T0 + dt, data=data))


@pytest.fixture(params=["sqlite", "postgresql"])
def ledger_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.sqlite'}"
        return
    import psycopg

    server = request.getfixturevalue("postgres_url")
    name = f"ledger_{secrets.token_hex(6)}"
    plain = server.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    yield server.rsplit("/", 1)[0] + f"/{name}"


def recomputed(backend: Backend) -> dict[str, float]:
    """GPU-seconds per user straight from the event logs (aviflow.status.usage_from_events)."""
    out: dict[str, float] = {}
    for job_id in backend.list_ids():
        user = backend.meta(job_id)["origin"]["hub"]["user"]
        usage = usage_from_events(backend.events(job_id), backend.spec(job_id).spec.total_gpus)
        out[user] = out.get(user, 0.0) + usage.gpu_seconds
    return out


def ledger_totals(ledger: Ledger) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in ledger.attempts():
        assert a.finished is not None
        out[a.user] = out.get(a.user, 0.0) + a.gpu_seconds(now=0)
    return out


def test_ledger_equals_event_logs_across_restarts_and_preemptions(tmp_path: Path, ledger_url: str) -> None:
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    preempted = make_job(store, "preempted", "alice", "a", nodes=2, gpus=4)
    emit(preempted, ("QUEUED", 0, 0, {}), ("STARTING", 1, 30, {}), ("RUNNING", 1, 41, {}),
         (RESTARTING, 1, 1230, {"node": 1, "exit_code": -9}),  # killed from outside: preempted
         ("STARTING", 2, 1230, {}), ("RUNNING", 2, 1236, {}), ("SUCCEEDED", 2, 4830, {}))
    crashed = make_job(store, "crashed", "bob", "b", nodes=1, gpus=8)
    emit(crashed, ("QUEUED", 0, 0, {}), ("STARTING", 1, 5, {}), ("RUNNING", 1, 9, {}),
         (RESTARTING, 1, 65, {"rank": 3, "exception": "RuntimeError"}),
         ("STARTING", 2, 65, {}), ("RUNNING", 2, 70, {}),
         ("FAILED", 2, 125, {"rank": 3, "exception": "RuntimeError"}))
    never = make_job(store, "never", "alice", "a", nodes=1, gpus=1)
    emit(never, ("QUEUED", 0, 0, {}), ("CANCELLED", 0, 60, {}))
    running = make_job(store, "running", "carol", "a", nodes=1, gpus=2)
    emit(running, ("QUEUED", 0, 0, {}), ("STARTING", 1, 100, {}), ("RUNNING", 1, 104, {}))

    first = Ledger(ledger_url)
    assert first.ingest(backend) == 4
    open_rows = [a for a in first.attempts() if a.finished is None]
    assert [(a.job_id, a.attempt, a.outcome) for a in open_rows] == [(running.id, 1, "RUNNING")]
    first.close()

    # the job goes on while the service is down: preempted by Kueue, then finishes
    emit(running, (RESTARTING, 1, 700, {"reason": "Preempted"}), ("STARTING", 2, 900, {}),
         ("RUNNING", 2, 905, {}), ("SUCCEEDED", 2, 1900, {}))
    second = Ledger(ledger_url)  # a restarted service on the same database
    assert second.ingest(backend) == 1  # only the unfinished job is read again
    second.ingest(backend, backend.list_ids())  # and re-reading everything changes nothing
    totals = ledger_totals(second)
    expected = recomputed(backend)
    assert totals.keys() == {"alice", "bob", "carol"}
    for user, seconds in expected.items():
        assert round(totals[user], 6) == round(seconds, 6), user
    assert totals == {"alice": 8 * (1200 + 3600), "bob": 8 * (60 + 60), "carol": 2 * (600 + 1000)}
    rows = {(a.job_id, a.attempt): a for a in second.attempts()}
    assert len(rows) == 6 == len(second.attempts())
    a1 = rows[(preempted.id, 1)]
    assert (a1.outcome, a1.preempted, a1.restarts, a1.queue_wait, a1.started) == ("PREEMPTED", True, 0, 30.0, T0 + 41)
    assert (rows[(preempted.id, 2)].outcome, rows[(preempted.id, 2)].restarts) == ("SUCCEEDED", 1)
    assert (rows[(crashed.id, 1)].outcome, rows[(crashed.id, 1)].preempted) == ("RESTARTED", False)
    assert rows[(crashed.id, 2)].outcome == "FAILED"
    r2 = rows[(running.id, 2)]
    assert (r2.outcome, r2.queue_wait, r2.preempted) == ("SUCCEEDED", 200.0, False)
    assert rows[(running.id, 1)].outcome == "PREEMPTED"
    states = {j["job_id"]: j["state"] for j in second.jobs()}
    assert states == {preempted.id: "SUCCEEDED", crashed.id: "FAILED", never.id: "CANCELLED",
                      running.id: "SUCCEEDED"}
    by_user = usage_report(second.attempts(), "user", now=0)
    assert {r["key"]: (r["gpu_seconds"], r["attempts"], r["preemptions"], r["restarts"]) for r in by_user} == {
        "alice": (38400.0, 2, 1, 1), "bob": (960.0, 2, 0, 1), "carol": (3200.0, 2, 1, 1)}
    second.close()


def att(job: str, attempt: int, user: str, team: str | None, gpus: int, admitted: float,
        finished: float | None, outcome: str = "SUCCEEDED", preempted: bool = False) -> AttemptRecord:
    return AttemptRecord(job_id=job, attempt=attempt, user=user, team=team, queue="q", nodes=1,
                         gpus=gpus, submitted=T0, admitted=T0 + admitted, started=None,
                         finished=None if finished is None else T0 + finished, outcome=outcome,
                         restarts=attempt - 1, preempted=preempted, queue_wait=admitted)


GOLDEN_ATTEMPTS = [
    att("j1", 1, "alice", "a", 8, 0, 1200, "PREEMPTED", True),  # 23:50 -> 00:10, 1 Jan 2026
    att("j1", 2, "alice", "a", 8, 1200, 4800),
    att("j2", 1, "bob", "b", 2, 300, None, "RUNNING"),  # 23:55, running at now = 00:05
]


def test_reports_golden() -> None:
    now = T0 + 900
    assert usage_report(GOLDEN_ATTEMPTS, "team", now) == [
        {"key": "a", "gpu_hours": 10.666667, "gpu_seconds": 38400.0, "attempts": 2, "jobs": 1, "restarts": 1, "preemptions": 1},
        {"key": "b", "gpu_hours": 0.333333, "gpu_seconds": 1200.0, "attempts": 1, "jobs": 1, "restarts": 0, "preemptions": 0},
    ]
    assert usage_report(GOLDEN_ATTEMPTS, "day", now) == [
        {"key": "2025-12-31", "gpu_hours": 1.5, "gpu_seconds": 5400.0, "attempts": 2, "jobs": 2, "restarts": 0, "preemptions": 1},
        {"key": "2026-01-01", "gpu_hours": 9.5, "gpu_seconds": 34200.0, "attempts": 1, "jobs": 2, "restarts": 1, "preemptions": 0},
    ]
    # 31 Dec 2025 and 1 Jan 2026 are both in ISO week 2026-W01 (it starts Monday 29 Dec)
    assert [(r["key"], r["gpu_seconds"], r["attempts"]) for r in usage_report(GOLDEN_ATTEMPTS, "week", now)] == [
        ("2026-W01", 39600.0, 3)]
    assert to_csv(usage_report(GOLDEN_ATTEMPTS, "user", now), "user") == (
        "user,gpu_hours,gpu_seconds,attempts,jobs,restarts,preemptions\n"
        "alice,10.666667,38400.0,2,1,1,1\n"
        "bob,0.333333,1200.0,1,1,0,0\n")
    with pytest.raises(ValueError, match="group by one of team, user, day, week"):
        usage_report(GOLDEN_ATTEMPTS, "month", now)  # type: ignore[arg-type]
