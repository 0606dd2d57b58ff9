"""The ledger's records across versions, and what is reported from them: a database of the
previous version is migrated (on SQLite and on a real PostgreSQL); reports are golden."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa
from ledger_kit import T0, E, StoreOnly, emit, make_job

from aviflow.attempts import AttemptRecord
from aviflow.records import JobState
from aviflow.store import RunStore
from aviflow_hub.ledger import Ledger
from aviflow_hub.ledger.migrate import pending
from aviflow_hub.ledger.reports import to_csv, usage_report

OLD_SCHEMA = sa.MetaData()  # the tables as the version before the typed contract created them
sa.Table(
    "aviflow_jobs",
    OLD_SCHEMA,
    sa.Column("job_id", sa.String(63), primary_key=True),
    sa.Column("name", sa.String(128)),
    sa.Column("user", sa.String(255), index=True),
    sa.Column("team", sa.String(63), nullable=True),
    sa.Column("queue", sa.String(63), nullable=False),
    sa.Column("nodes", sa.Integer, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("submitted", sa.Float, nullable=False),
    sa.Column("state", sa.String(16), nullable=False),
    sa.Column("updated", sa.Float, nullable=False),
)
sa.Table(
    "aviflow_attempts",
    OLD_SCHEMA,
    sa.Column("job_id", sa.String(63), primary_key=True),
    sa.Column("attempt", sa.Integer, primary_key=True),
    sa.Column("user", sa.String(255), nullable=False),
    sa.Column("team", sa.String(63), nullable=True),
    sa.Column("queue", sa.String(63), nullable=False),
    sa.Column("nodes", sa.Integer, nullable=False),
    sa.Column("gpus", sa.Integer, nullable=False),
    sa.Column("submitted", sa.Float, nullable=False),
    sa.Column("admitted", sa.Float, nullable=False),
    sa.Column("started", sa.Float, nullable=True),
    sa.Column("finished", sa.Float, nullable=True),
    sa.Column("outcome", sa.String(16), nullable=False),
    sa.Column("restarts", sa.Integer, nullable=False),
    sa.Column("preempted", sa.Boolean, nullable=False),
    sa.Column("queue_wait", sa.Float, nullable=False),
)


def test_a_ledger_of_the_previous_version_is_migrated(tmp_path: Path, ledger_url: str) -> None:
    engine = sa.create_engine(ledger_url)
    OLD_SCHEMA.create_all(engine)
    with engine.begin() as conn:
        conn.execute(
            OLD_SCHEMA.tables["aviflow_jobs"].insert(),
            [
                {
                    "job_id": "old-1",
                    "name": "old",
                    "user": "alice",
                    "team": "a",
                    "queue": "q-a",
                    "nodes": 2,
                    "gpus": 8,
                    "submitted": T0,
                    "state": "SUCCEEDED",
                    "updated": T0 + 100,
                }
            ],
        )
        conn.execute(
            OLD_SCHEMA.tables["aviflow_attempts"].insert(),
            [
                {
                    "job_id": "old-1",
                    "attempt": 1,
                    "user": "alice",
                    "team": "a",
                    "queue": "q-a",
                    "nodes": 2,
                    "gpus": 8,
                    "submitted": T0,
                    "admitted": T0 + 10,
                    "started": T0 + 12,
                    "finished": T0 + 100,
                    "outcome": "SUCCEEDED",
                    "restarts": 0,
                    "preempted": False,
                    "queue_wait": 10.0,
                }
            ],
        )
    todo = pending(engine)
    assert any("ADD COLUMN" in s and "gpus_per_node" in s for s in todo), todo
    assert any("ADD COLUMN" in s and "expected_start" in s for s in todo), todo
    made = {s.split()[5] for s in todo if s.startswith("CREATE INDEX IF NOT EXISTS")}
    # the listings' order, and one user's (and what the old schema lacked)
    assert {"ix_aviflow_jobs_submitted", "ix_aviflow_jobs_user_submitted"} <= made, todo
    engine.dispose()

    ledger = Ledger(ledger_url)
    assert pending(ledger.engine) == []  # migrated, and a second run has nothing to do
    old = ledger.job("old-1", now=0)
    assert old is not None
    assert (old.nodes, old.gpus_per_node, old.gpus, old.state, old.gpu_seconds, old.origin) == (
        2,
        4,
        8,
        JobState.SUCCEEDED,
        8 * 90.0,
        {},
    )
    assert ledger.finished_ids() == {"old-1"}
    # new jobs are stored in full, with users longer than the old VARCHAR(255)
    store = RunStore(tmp_path / "runs")
    run = make_job(store, "new", "u" * 300, "b", nodes=1, gpus=2)
    emit(run, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 5, {}), (E.RUNNING, 1, 6, {}))
    assert ledger.apply(StoreOnly(store.root).changes(done=ledger.finished_ids()).poll()) == {}
    new = ledger.job(run.id)
    assert new is not None and new.user == "u" * 300 and new.gpus_per_node == 2
    assert {s.id for s in ledger.summaries()} == {"old-1", run.id}
    ledger.close()
    again = Ledger(ledger_url)  # opening it again migrates nothing and reads both
    assert [s.id for s in again.summaries()] == ["old-1", run.id]  # same time: by id, descending
    again.close()


def att(
    job: str,
    attempt: int,
    user: str,
    team: str | None,
    gpus: int,
    admitted: float,
    finished: float | None,
    outcome: str = "SUCCEEDED",
    preempted: bool = False,
) -> AttemptRecord:
    return AttemptRecord(
        job_id=job,
        attempt=attempt,
        user=user,
        team=team,
        queue="q",
        nodes=1,
        gpus=gpus,
        submitted=T0,
        admitted=T0 + admitted,
        started=None,
        finished=None if finished is None else T0 + finished,
        outcome=outcome,
        restarts=attempt - 1,
        preempted=preempted,
        queue_wait=admitted,
    )


GOLDEN_ATTEMPTS = [
    att("j1", 1, "alice", "a", 8, 0, 1200, "PREEMPTED", True),  # 23:50 -> 00:10, 1 Jan 2026
    att("j1", 2, "alice", "a", 8, 1200, 4800),
    att("j2", 1, "bob", "b", 2, 300, None, "RUNNING"),  # 23:55, running at now = 00:05
]


UNMEASURED = {"used_gpu_hours": 0.0, "used_cpu_hours": 0.0, "idle_jobs": 0}  # no USAGE events


def test_reports_golden() -> None:
    now = T0 + 900
    assert usage_report(GOLDEN_ATTEMPTS, "team", now) == [
        {
            "key": "a",
            "gpu_hours": 10.666667,
            "gpu_seconds": 38400.0,
            "attempts": 2,
            "jobs": 1,
            "restarts": 1,
            "preemptions": 1,
            **UNMEASURED,
        },
        {
            "key": "b",
            "gpu_hours": 0.333333,
            "gpu_seconds": 1200.0,
            "attempts": 1,
            "jobs": 1,
            "restarts": 0,
            "preemptions": 0,
            **UNMEASURED,
        },
    ]
    assert usage_report(GOLDEN_ATTEMPTS, "day", now) == [
        {
            "key": "2025-12-31",
            "gpu_hours": 1.5,
            "gpu_seconds": 5400.0,
            "attempts": 2,
            "jobs": 2,
            "restarts": 0,
            "preemptions": 1,
            **UNMEASURED,
        },
        {
            "key": "2026-01-01",
            "gpu_hours": 9.5,
            "gpu_seconds": 34200.0,
            "attempts": 1,
            "jobs": 2,
            "restarts": 1,
            "preemptions": 0,
            **UNMEASURED,
        },
    ]
    # 31 Dec 2025 and 1 Jan 2026 are both in ISO week 2026-W01 (it starts Monday 29 Dec)
    assert [
        (r["key"], r["gpu_seconds"], r["attempts"])
        for r in usage_report(GOLDEN_ATTEMPTS, "week", now)
    ] == [("2026-W01", 39600.0, 3)]
    assert to_csv(usage_report(GOLDEN_ATTEMPTS, "user", now), "user") == (
        "user,gpu_hours,gpu_seconds,attempts,jobs,restarts,preemptions,"
        "used_gpu_hours,used_cpu_hours,idle_jobs\n"
        "alice,10.666667,38400.0,2,1,1,1,0.0,0.0,0\n"
        "bob,0.333333,1200.0,1,1,0,0,0.0,0.0,0\n"
    )
    with pytest.raises(ValueError, match="group by one of team, user, day, week"):
        usage_report(GOLDEN_ATTEMPTS, "month", now)  # type: ignore[arg-type]
