"""The usage ledger on SQLite and on a real PostgreSQL, fed by the change feed: totals equal
the event logs, to the second, across service restarts, restarts and preemptions; folding
increments equals folding everything; a job that cannot be stored, or a row that cannot be
read, never hides the others, and one whose change could not be stored is read again."""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest
import sqlalchemy as sa
from ledger_kit import (
    CRASH,
    PREEMPTED_BY_A_KILL,
    T0,
    E,
    StoreOnly,
    emit,
    ledger_totals,
    make_job,
    recomputed,
)

from aviflow.backends._feed import JobChange
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import Event, JobState, JobStatus
from aviflow.store import RunStore, atomic_write
from aviflow_hub.authz import Visibility
from aviflow_hub.ledger import Ledger
from aviflow_hub.ledger.reports import usage_report
from aviflow_hub.service.ingest import Ingest


def test_ledger_equals_event_logs_across_restarts_and_preemptions(
    tmp_path: Path, ledger_url: str
) -> None:
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    preempted = make_job(store, "preempted", "alice", "a", nodes=2, gpus=4)
    emit(
        preempted,
        (E.QUEUED, 0, 0, {}),
        (E.STARTING, 1, 30, {}),
        (E.RUNNING, 1, 41, {}),
        (E.RESTARTING, 1, 1230, PREEMPTED_BY_A_KILL),
        (E.STARTING, 2, 1230, {}),
        (E.RUNNING, 2, 1236, {}),
        (E.SUCCEEDED, 2, 4830, {}),
    )
    crashed = make_job(store, "crashed", "bob", "b", nodes=1, gpus=8)
    emit(
        crashed,
        (E.QUEUED, 0, 0, {}),
        (E.STARTING, 1, 5, {}),
        (E.RUNNING, 1, 9, {}),
        (E.RESTARTING, 1, 65, CRASH),
        (E.STARTING, 2, 65, {}),
        (E.RUNNING, 2, 70, {}),
        (E.FAILED, 2, 125, CRASH),
    )
    never = make_job(store, "never", "alice", "a", nodes=1, gpus=1)
    emit(never, (E.QUEUED, 0, 0, {}), (E.CANCELLED, 0, 60, {}))
    running = make_job(store, "running", "carol", "a", nodes=1, gpus=2)
    emit(running, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 100, {}), (E.RUNNING, 1, 104, {}))

    first = Ledger(ledger_url)
    feed = backend.changes(done=first.finished_ids())
    assert first.apply(feed.poll()) == {}
    open_rows = [a for a in first.attempts() if a.finished is None]
    assert [(a.job_id, a.attempt, a.outcome) for a in open_rows] == [(running.id, 1, "RUNNING")]
    assert feed.poll() == []  # nothing new: nothing read but a status and an event cursor
    # Kueue preempts the running job while the service is up: one change, only the new event
    emit(running, (E.PREEMPTED, 1, 700, {}))
    changes = feed.poll()
    assert [(c.job_id, [e.type for e in c.events], c.reset) for c in changes] == [
        (running.id, [E.PREEMPTED], False)
    ]
    assert first.apply(changes) == {}
    first.close()

    # the job goes on while the service is down, and finishes
    emit(running, (E.STARTING, 2, 900, {}), (E.RUNNING, 2, 905, {}), (E.SUCCEEDED, 2, 1900, {}))
    second = Ledger(ledger_url)  # a restarted service on the same database
    assert second.finished_ids() == {preempted.id, crashed.id, never.id}
    changes = backend.changes(done=second.finished_ids()).poll()
    assert [c.job_id for c in changes] == [running.id]  # only the unfinished job is read again
    assert second.apply(changes) == {}
    before = second.attempts()
    assert second.apply(backend.changes().poll()) == {}  # re-reading everything changes nothing
    assert second.attempts() == before
    totals = ledger_totals(second)
    expected = recomputed(backend)
    assert totals.keys() == {"alice", "bob", "carol"}
    for user, seconds in expected.items():
        assert round(totals.get(user, 0.0), 6) == round(seconds, 6), user
    assert totals == {"alice": 8 * (1200 + 3600), "bob": 8 * (60 + 60), "carol": 2 * (600 + 1000)}
    rows = {(a.job_id, a.attempt): a for a in second.attempts()}
    assert len(rows) == 6 == len(second.attempts())
    a1 = rows[(preempted.id, 1)]
    assert (a1.outcome, a1.preempted, a1.restarts, a1.queue_wait, a1.started) == (
        "PREEMPTED",
        True,
        0,
        30.0,
        T0 + 41,
    )
    assert (rows[(preempted.id, 2)].outcome, rows[(preempted.id, 2)].restarts) == ("SUCCEEDED", 1)
    assert (rows[(crashed.id, 1)].outcome, rows[(crashed.id, 1)].preempted) == ("RESTARTED", False)
    assert rows[(crashed.id, 2)].outcome == "FAILED"
    r2 = rows[(running.id, 2)]
    assert (r2.outcome, r2.queue_wait, r2.preempted) == ("SUCCEEDED", 200.0, False)
    assert rows[(running.id, 1)].outcome == "PREEMPTED"
    jobs = {s.id: s for s in second.summaries(now=0)}
    assert {j: (s.state.value, s.gpu_seconds, s.finished) for j, s in jobs.items()} == {
        preempted.id: ("SUCCEEDED", 38400.0, T0 + 4830),
        crashed.id: ("FAILED", 960.0, T0 + 125),
        never.id: ("CANCELLED", 0.0, T0 + 60),
        running.id: ("SUCCEEDED", 3200.0, T0 + 1900),
    }
    p = jobs[preempted.id]
    assert (p.name, p.user, p.team, p.queue, p.nodes, p.gpus_per_node, p.gpus, p.attempt) == (
        "preempted",
        "alice",
        "a",
        "q-a",
        2,
        4,
        8,
        2,
    )
    assert jobs[crashed.id].failure is not None and jobs[crashed.id].message == "failed"
    assert second.job(crashed.id, now=0) == jobs[crashed.id]
    assert second.job("no-such-job") is None
    assert [s.id for s in second.summaries(limit=2)] == [s.id for s in second.summaries()][:2]
    mine = second.summaries(seen=Visibility(False, frozenset({"bob"}), frozenset()))
    assert [s.id for s in mine] == [crashed.id]
    # one user's, newest first, within what the caller may see (a team's)
    team_a_seen = Visibility(False, frozenset(), frozenset({"a"}))
    alices = [s.id for s in second.summaries() if s.user == "alice"]
    assert alices and [s.id for s in second.summaries(seen=team_a_seen, user="alice")] == alices
    assert [s.id for s in second.summaries(1, team_a_seen, user="alice")] == alices[:1]
    assert second.summaries(seen=team_a_seen, user="bob") == []  # bob's are not team a's
    team_a = second.attempts(seen=Visibility(False, frozenset(), frozenset({"a"})))
    assert {a.user for a in team_a} == {"alice", "carol"}
    assert second.state_counts() == {"SUCCEEDED": 2, "FAILED": 1, "CANCELLED": 1}
    by_user = usage_report(second.attempts(), "user", now=0)
    assert {
        r["key"]: (r["gpu_seconds"], r["attempts"], r["preemptions"], r["restarts"])
        for r in by_user
    } == {"alice": (38400.0, 2, 1, 1), "bob": (960.0, 2, 0, 1), "carol": (3200.0, 2, 1, 1)}
    second.close()


HISTORY = [
    (E.QUEUED, 0, 0, {}),
    (E.STARTING, 1, 10, {}),
    (E.RUNNING, 1, 12, {}),
    (E.RESTARTING, 1, 50, CRASH),
    (E.STARTING, 2, 50, {}),
    (E.RUNNING, 2, 55, {}),
    (E.EVICTED, 2, 80, {}),
    (E.QUEUED, 2, 80, {}),
    (E.STARTING, 3, 95, {}),
    (E.RUNNING, 3, 99, {}),
    (E.SUCCEEDED, 3, 160, {}),
]


def test_folding_increments_equals_folding_everything(tmp_path: Path) -> None:
    """Whatever way the feed splits a job's history, the ledger ends with the same rows."""
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    whole = make_job(store, "whole", "alice", "a", nodes=1, gpus=2)
    emit(whole, *HISTORY)
    ledger = Ledger("sqlite://")
    ledger.apply(backend.changes().poll())
    expected = [replace(a, job_id="x") for a in ledger.attempts()]
    assert [a.outcome for a in expected] == ["RESTARTED", "EVICTED", "SUCCEEDED"]
    for split in range(len(HISTORY) + 1):
        run = make_job(store, f"split-{split}", "alice", "a", nodes=1, gpus=2)
        feed = backend.changes(done=[j for j in backend.list_ids() if j != run.id])
        for i, event in enumerate(HISTORY):
            emit(run, event)
            if i + 1 == split or i % 3 == 0:
                assert ledger.apply(feed.poll()) == {}
        assert ledger.apply(feed.poll()) == {}
        got = [replace(a, job_id="x") for a in ledger.attempts() if a.job_id == run.id]
        assert got == expected, split
        assert ledger.job(run.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]


class StatusLags(StoreOnly):
    """Its status reads of job ``lag`` answer the status before the job's end ``stale``
    times: the feed read the status, then the writer recorded the end (events, then
    status), then the feed read the events."""

    lag, stale = "", 0

    def status(self, job_id: str) -> JobStatus:
        if job_id == self.lag and self.stale > 0:
            self.stale -= 1
            return JobStatus(state=JobState.RUNNING, attempt=1, message="running")
        return super().status(job_id)


@pytest.mark.parametrize("stale", [1, 2])
def test_a_final_event_read_beside_a_stale_status_leaves_no_job_running(
    tmp_path: Path, stale: int
) -> None:
    """The end's event came in the poll whose status was read just before it was written:
    the status is read again (1: the writer had written it by then) or the job is read at
    the next poll (2: not yet), never left RUNNING in the ledger (the burst job that stayed
    RUNNING in test_api_faults under a loaded machine)."""
    store = RunStore(tmp_path / "runs")
    backend = StatusLags(store.root)
    run = make_job(store, "ends", "alice", "a", nodes=1, gpus=2)
    emit(run, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 5, {}), (E.RUNNING, 1, 9, {}))
    ledger = Ledger("sqlite://")
    feed = backend.changes()
    assert ledger.apply(feed.poll()) == {}
    emit(run, (E.SUCCEEDED, 1, 60, {}))
    backend.lag, backend.stale = run.id, stale
    changes = feed.poll()
    assert [(c.job_id, [e.type for e in c.events]) for c in changes] == [(run.id, [E.SUCCEEDED])]
    assert ledger.apply(changes) == {}
    if stale == 2:
        assert changes[0].status.state is JobState.RUNNING
        later = feed.poll()  # the final status, nothing else
        assert [(c.job_id, c.events, c.status.state) for c in later] == [
            (run.id, [], JobState.SUCCEEDED)
        ]
        assert ledger.apply(later) == {}
    assert ledger.job(run.id).state is JobState.SUCCEEDED  # type: ignore[union-attr]
    assert feed.poll() == []  # done: never read again
    ledger.close()


def test_a_queued_jobs_expected_start_and_wait_reach_the_list(tmp_path: Path) -> None:
    """The feed carries a status whose estimate moved; the ledger's list shows it (aviflow-api's
    job list, the sidebar through HubBackend), and drops it once the job starts."""
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    run = make_job(store, "waits", "alice", "a", nodes=1, gpus=2)
    emit(run, (E.QUEUED, 0, 0, {}))
    ledger = Ledger("sqlite://")
    feed = backend.changes()
    assert ledger.apply(feed.poll()) == {}
    assert (ledger.summaries()[0].expected_start, ledger.summaries()[0].wait) == (None, None)
    est = Estimate("", T0 + 300, T0 + 720, assumed=("queue order as reported",))
    wait = WaitNumbers("q-a", 4, 4, 0, 2, 1, 2)
    run.write_status(replace(run.status(), expected_start=est, wait=wait))
    assert ledger.apply(feed.poll()) == {}
    [listed] = ledger.summaries()
    assert (listed.expected_start, listed.wait) == (est, wait)
    assert ledger.job(run.id) == listed
    emit(run, (E.STARTING, 1, 400, {}))  # the lifecycle's status no longer carries them
    assert ledger.apply(feed.poll()) == {}
    assert (ledger.summaries()[0].expected_start, ledger.summaries()[0].wait) == (None, None)
    ledger.close()


def test_a_job_that_cannot_be_stored_is_reported_and_the_others_are_stored(
    tmp_path: Path, ledger_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    good = make_job(store, "good", "alice", "a", nodes=1, gpus=1)
    # text no database can hold as it is: NUL and a lone surrogate (a rank's output, say)
    emit(good, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 1, {}))
    changes = backend.changes().poll()
    odd = replace(changes[0], status=replace(changes[0].status, message="out\x00put \ud800"))
    unknown = JobChange(
        "unknown-job", JobStatus(JobState.RUNNING, 1), [Event(E.RUNNING, 1, time=T0)]
    )
    huge = replace(changes[0], job_id="huge", status=JobStatus(JobState.RUNNING, attempt=2**70))
    ledger = Ledger(ledger_url)
    with caplog.at_level(logging.WARNING, logger="aviflow_hub.ledger"):
        problems = ledger.apply([unknown, huge, odd])
    assert set(problems) == {"unknown-job", "huge"}, problems
    assert "no row of this job" in problems["unknown-job"]
    assert "unknown-job" in caplog.text and "huge" in caplog.text
    stored = ledger.job(good.id)
    assert stored is not None and stored.message == "out\ufffdput ?"
    assert [s.id for s in ledger.summaries()] == [good.id]
    ledger.close()


def test_rows_that_cannot_be_read_are_left_out(
    tmp_path: Path, ledger_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    good = make_job(store, "good", "alice", "a", nodes=1, gpus=1)
    emit(good, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 1, {}), (E.SUCCEEDED, 1, 11, {}))
    ledger = Ledger(ledger_url)
    ledger.apply(backend.changes().poll())
    row = {
        "name": "x",
        "user": "alice",
        "team": "a",
        "queue": "q-a",
        "nodes": 1,
        "gpus": 1,
        "submitted": T0,
        "updated": T0,
        "state": "RUNNING",
    }
    bad = {
        "bad-state": {"state": "EXPLODED"},
        "bad-failure": {"failure": "{not json"},
        "bad-origin": {"origin": "[1, 2]"},
    }
    with ledger.engine.begin() as conn:
        for job_id, broken in bad.items():
            conn.execute(
                sa.text(
                    'INSERT INTO aviflow_jobs (job_id, name, "user", team, queue, nodes, gpus, submitted,'
                    " updated, state, failure, origin) VALUES (:job_id, :name, :user, :team, :queue, :nodes,"
                    " :gpus, :submitted, :updated, :state, :failure, :origin)"
                ),
                {"failure": None, "origin": None, **row, **broken, "job_id": job_id},
            )
        if ledger.engine.dialect.name == "sqlite":  # SQLite stores any type in any column
            conn.execute(
                sa.text(
                    "INSERT INTO aviflow_attempts VALUES ('bad-attempt', 1, 'alice', 'a', 'q-a', 1, 1,"
                    " 0, 'yesterday', NULL, NULL, 'RUNNING', 0, 0, 0, NULL, NULL, NULL, NULL)"
                )
            )
    with caplog.at_level(logging.WARNING, logger="aviflow_hub.ledger"):
        assert [s.id for s in ledger.summaries()] == [good.id]
        assert [s.id for s in ledger.summaries()] == [good.id]
        assert [a.job_id for a in ledger.attempts()] == [good.id]
        assert all(ledger.job(j) is None for j in bad)
    for job_id in bad:
        assert (
            caplog.text.count(f"ledger row of job {job_id} cannot be read") == 1
        )  # once, not per read
    assert ledger.state_counts()["EXPLODED"] == 1
    assert ledger.apply(backend.changes().poll()) == {}  # the feed goes on
    ledger.close()


class FailsOnce(Ledger):
    """A ledger whose first write of one job fails (a lost connection, say)."""

    def __init__(self, url: str, job_id: str) -> None:
        super().__init__(url)
        self.job_id, self.failed = job_id, False

    def _apply(self, change: JobChange, now: float) -> None:
        if change.job_id == self.job_id and not self.failed:
            self.failed = True
            raise OSError("the database went away")
        super()._apply(change, now)


def test_ingest_rereads_a_job_whose_change_could_not_be_stored(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "runs")
    backend = StoreOnly(store.root)
    flaky = make_job(store, "flaky", "alice", "a", nodes=1, gpus=1)
    steady = make_job(store, "steady", "bob", "b", nodes=1, gpus=1)
    broken = make_job(store, "broken", "bob", "b", nodes=1, gpus=1)
    atomic_write(broken.meta_path, "{garbage")  # a job the feed cannot read
    for run in (flaky, steady):
        emit(run, (E.QUEUED, 0, 0, {}), (E.STARTING, 1, 10, {}))
    now = [0.0]
    ledger = FailsOnce("sqlite://", flaky.id)
    ingest = Ingest(backend, ledger, first_retry=1.0, clock=lambda: now[0])
    assert ingest.step() == 1  # steady stored, flaky failed
    assert set(ingest.problems) == {flaky.id, broken.id}
    assert ledger.job(flaky.id) is None and ledger.job(steady.id) is not None
    for run in (flaky, steady):
        emit(run, (E.RUNNING, 1, 20, {}), (E.SUCCEEDED, 1, 40, {}))
    now[0] = 0.5
    ingest.step()  # not yet: its retry is due after a second; steady's end is stored
    assert set(ingest.problems) == {flaky.id, broken.id}
    now[0] = 1.0
    ingest.step()  # flaky is read again from its first event
    assert set(ingest.problems) == {broken.id}
    rows = {a.job_id: (a.admitted, a.finished, a.outcome) for a in ledger.attempts()}
    assert rows == {
        flaky.id: (T0 + 10, T0 + 40, "SUCCEEDED"),
        steady.id: (T0 + 10, T0 + 40, "SUCCEEDED"),
    }
    assert ledger.finished_ids() == {flaky.id, steady.id}
    assert ingest.step() == 0
