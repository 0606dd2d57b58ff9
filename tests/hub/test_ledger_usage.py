"""Used hours in the ledger, on SQLite and on a real PostgreSQL: the driver's ``USAGE`` events
give each attempt its mean utilization (GPU, or CPU on a pool without GPUs, never mixed),
the ledger keeps it across increments, a ledger of the version before is migrated, and the
usage report shows used beside allocated hours and the jobs flagged idle."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from ledger_kit import T0, StoreOnly, emit, make_job

from aviflow.attempts import AttemptRecord
from aviflow.records import EventType
from aviflow.store import RunDir, RunStore
from aviflow_hub.ledger import Ledger
from aviflow_hub.ledger.html import render_report
from aviflow_hub.ledger.migrate import pending
from aviflow_hub.ledger.models import Base
from aviflow_hub.ledger.reports import attempts_csv, to_csv, usage_report

E = EventType
NEW_COLUMNS = ("use_kind", "use_seconds", "busy_seconds", "idle")


def _gpu(util: float) -> dict[str, object]:
    return {"kind": "gpu", "util": util, "ranks": 4}


def _jobs(store: RunStore) -> tuple[RunDir, RunDir]:
    """A GPU job at 50% then 100% (mean 75%), and a CPU-pool job at 20%, flagged idle."""
    gpu = make_job(store, "trains", "alice", "a", nodes=1, gpus=4)
    emit(
        gpu,
        (E.QUEUED, 0, 0, {}),
        (E.STARTING, 1, 0, {}),
        (E.RUNNING, 1, 10, {}),
        (E.USAGE, 1, 70, _gpu(50.0)),  # 10..70 at 50%
    )
    cpu = make_job(store, "sleeps", "bob", "b", nodes=1, gpus=2)
    emit(
        cpu,
        (E.QUEUED, 0, 0, {}),
        (E.STARTING, 1, 0, {}),
        (E.RUNNING, 1, 20, {}),
        (E.USAGE, 1, 120, {"kind": "cpu", "util": 20.0, "ranks": 2}),
        (E.IDLE, 1, 120, {"kind": "cpu", "below": 30.0, "after": 60.0, "action": "flag"}),
        (E.CANCELLED, 1, 180, {}),
    )
    return gpu, cpu


def test_used_hours_from_usage_events_across_increments(tmp_path: Path, ledger_url: str) -> None:
    store = RunStore(tmp_path / "runs")
    feed = StoreOnly(store.root).changes()
    gpu, _ = _jobs(store)
    ledger = Ledger(ledger_url)
    assert ledger.apply(feed.poll()) == {}
    emit(
        gpu,
        (E.USAGE, 1, 130, _gpu(100.0)),  # 70..130 at 100%
        (E.USAGE, 1, 140, {"kind": "gpu", "util": 140.0}),  # not a utilization: ignored
        (E.SUCCEEDED, 1, 190, {}),
    )
    assert ledger.apply(feed.poll()) == {}
    ledger.close()
    ledger = Ledger(ledger_url)  # what was stored, read again
    by_user = {a.user: a for a in ledger.attempts()}
    alice, bob = by_user["alice"], by_user["bob"]
    assert (alice.use_kind, alice.use_seconds, alice.busy_seconds, alice.idle) == (
        "gpu",
        120.0,
        90.0,
        False,
    )
    assert alice.mean_util() == 75.0
    assert alice.used_seconds(now=0) == 4 * 190 * 0.75  # allocated x mean utilization
    assert (bob.use_kind, bob.mean_util(), bob.used_seconds(now=0), bob.idle) == (
        "cpu",
        20.0,
        2 * 180 * 0.2,
        True,
    )
    rows = usage_report(ledger.attempts(), "user", now=T0 + 1000)
    assert [
        (r["key"], r["gpu_hours"], r["used_gpu_hours"], r["used_cpu_hours"], r["idle_jobs"])
        for r in rows
    ] == [
        ("alice", round(760 / 3600, 6), round(570 / 3600, 6), 0.0, 0),
        ("bob", round(360 / 3600, 6), 0.0, round(72 / 3600, 6), 1),
    ]
    ledger.close()


def test_a_ledger_without_the_use_columns_is_migrated(tmp_path: Path, ledger_url: str) -> None:
    before = sa.MetaData()  # the tables as the version before used hours made them
    for table in Base.metadata.sorted_tables:
        cols = [
            sa.Column(c.name, c.type, primary_key=c.primary_key, nullable=c.nullable)
            for c in table.columns
            if c.name not in NEW_COLUMNS
        ]
        sa.Table(table.name, before, *cols)
    engine = sa.create_engine(ledger_url)
    before.create_all(engine)
    old = {
        "job_id": "old-1",
        "attempt": 1,
        "user": "alice",
        "team": "a",
        "queue": "q-a",
        "nodes": 1,
        "gpus": 8,
        "submitted": T0,
        "admitted": T0,
        "started": T0 + 2,
        "finished": T0 + 100,
        "outcome": "SUCCEEDED",
        "restarts": 0,
        "preempted": False,
        "queue_wait": 0.0,
    }
    with engine.begin() as conn:
        conn.execute(before.tables["aviflow_attempts"].insert(), [old])
    added = sorted(c for s in pending(engine) if "ADD COLUMN" in s for c in NEW_COLUMNS if c in s)
    assert added == sorted(NEW_COLUMNS)
    engine.dispose()
    ledger = Ledger(ledger_url)
    assert pending(ledger.engine) == []
    [a] = ledger.attempts()
    assert (a.use_kind, a.mean_util(), a.used_seconds(now=0), a.idle) == (None, None, None, False)
    store = RunStore(tmp_path / "runs")
    _jobs(store)
    assert ledger.apply(StoreOnly(store.root).changes().poll()) == {}
    assert {a.user: a.mean_util() for a in ledger.attempts() if a.job_id != "old-1"} == {
        "alice": 50.0,
        "bob": 20.0,
    }
    ledger.close()


def _att(kind: str | None, util: float, idle: bool = False, user: str = "alice") -> AttemptRecord:
    return AttemptRecord(
        job_id=f"{user}-{kind}",
        attempt=1,
        user=user,
        team="a",
        queue="q",
        nodes=1,
        gpus=8,
        submitted=T0,
        admitted=T0,
        started=T0,
        finished=T0 + 3600,
        outcome="SUCCEEDED",
        restarts=0,
        preempted=False,
        queue_wait=0.0,
        use_kind=kind,
        use_seconds=3600.0 if kind else 0.0,
        busy_seconds=36.0 * util if kind else 0.0,
        idle=idle,
    )


def test_the_report_shows_used_beside_allocated_hours() -> None:
    attempts = [_att("gpu", 25.0), _att("cpu", 50.0, idle=True, user="bob"), _att(None, 0.0)]
    now = T0 + 7200
    assert to_csv(usage_report(attempts, "team", now), "team") == (
        "team,gpu_hours,gpu_seconds,attempts,jobs,restarts,preemptions,"
        "used_gpu_hours,used_cpu_hours,idle_jobs\n"
        "a,24.0,86400.0,3,3,0,0,2.0,4.0,1\n"
    )
    lines = attempts_csv(attempts[:1], now).splitlines()
    assert lines[0].endswith(",use_kind,idle,gpu_hours,mean_util,used_hours")
    assert lines[1].endswith(",gpu,False,8.0,25.0,2.0")
    page = render_report(
        {"user": usage_report(attempts, "user", now)},
        viewer="admin",
        scope="all",
        generated="now",
        csv_base="/usage",
    )
    assert "<th>used GPU-hours</th><th>used hours (CPU pools)</th>" in page
    assert "<td>alice</td><td>16.000</td><td>2.000</td><td>0.000</td>" in page
    assert "<td>bob</td><td>8.000</td><td>0.000</td><td>4.000</td>" in page


@pytest.mark.parametrize("util", [float("nan"), -1.0, 100.5, "50", True, None])
def test_a_usage_event_without_a_utilization_adds_nothing(util: object) -> None:
    from aviflow.attempts import JobInfo, attempts_from_events
    from aviflow.records import Event

    info = JobInfo("j", "alice", None, "q", nodes=1, gpus=2, submitted=0.0)
    events = [
        Event(E.STARTING, 1, time=0.0),
        Event(E.RUNNING, 1, time=1.0),
        Event(E.USAGE, 1, time=5.0, data={"kind": "gpu", "util": util}),
        Event(E.USAGE, 1, time=9.0, data={"kind": "tpu", "util": 50.0}),
    ]
    [a] = attempts_from_events(info, events)
    assert (a.use_kind, a.use_seconds, a.mean_util()) == (None, 0.0, None)


def test_the_hubs_local_backend_gets_the_admins_rule(tmp_path: Path) -> None:
    from aviflow.usage import IdlePolicy, UsageSettings
    from aviflow_hub.config import HubConfig
    from aviflow_hub.service.context import make_backend

    cfg = HubConfig.from_yaml(
        f"hub: {{dataDir: {tmp_path}}}\n"
        "api:\n  local:\n    usage:\n      intervalSeconds: 15\n"
        "      idle: {belowPercent: 5, afterSeconds: 900, action: cancel}\n",
        source="values",
    )
    rule = IdlePolicy(below=5, after=900, action="cancel")
    assert make_backend(cfg).usage == UsageSettings(interval=15, idle=rule)  # type: ignore[attr-defined]
