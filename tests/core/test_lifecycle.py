"""The one lifecycle: observations in, events and actions out (pure, no processes)."""

from __future__ import annotations

import pytest

from aviflow.attempts import JobInfo, attempts_from_events, fold_attempts, held_seconds
from aviflow.lifecycle import (
    MAX_CANCEL_MESSAGE,
    Admitted,
    AttemptEnded,
    CancelRequested,
    Evicted,
    Lifecycle,
    Lost,
    NodeExited,
    NodesUp,
    Observation,
    Policy,
    StartAttempt,
    StopAttempt,
    Tick,
    Unrunnable,
)
from aviflow.records import EventType, FailureInfo, JobState

E = EventType
BOOM = FailureInfo(rank=1, node=0, exception="ValueError", message="boom", traceback="tb")


def run(policy: Policy, *observations: Observation) -> tuple[Lifecycle, list[tuple], list]:
    """Feed ``observations`` after submission; (lifecycle, [(type, attempt, message)], actions)."""
    step = Lifecycle(policy).submitted(0.0)
    lc, events, actions = step.lifecycle, list(step.events), list(step.actions)
    for obs in observations:
        step = lc.observe(obs)
        lc = step.lifecycle
        events += step.events
        actions += step.actions
    return lc, [(e.type.value, e.attempt, e.message) for e in events], actions


def test_a_job_that_succeeds():
    lc, events, actions = run(
        Policy(),
        Admitted(1.0),
        NodesUp(2.0, 1),
        NodeExited(5.0, 1, node=0, code=0),  # one node done: wait for the others
        AttemptEnded(6.0, 1, {0: 0, 1: 0}),
    )
    assert events == [
        ("QUEUED", 0, "waiting for admission"),
        ("STARTING", 1, "starting"),
        ("RUNNING", 1, "running"),
        ("SUCCEEDED", 1, "all ranks finished"),
    ]
    assert actions == [StartAttempt(1)]
    assert lc.state is JobState.SUCCEEDED and lc.status().failure is None
    # a finished job ignores everything
    assert lc.observe(CancelRequested(9.0)).events == []


def test_a_failing_rank_restarts_the_whole_group_until_max_restarts_then_fails():
    lc, events, actions = run(
        Policy(max_restarts=1),
        Admitted(1.0),
        NodesUp(2.0, 1),
        NodeExited(3.0, 1, node=0, code=1),
        NodeExited(3.1, 1, node=1, code=1),  # the second exit changes nothing: already stopping
        AttemptEnded(3.5, 1, {0: 1, 1: 1}, BOOM),
        NodesUp(4.0, 2),
        NodeExited(5.0, 2, node=0, code=1),
        AttemptEnded(5.5, 2, {0: 1, 1: None}, BOOM),
    )
    assert events == [
        ("QUEUED", 0, "waiting for admission"),
        ("STARTING", 1, "starting"),
        ("RUNNING", 1, "running"),
        ("RESTARTING", 1, "rank 1 on node 0 failed"),
        ("STARTING", 2, "restart 1 of 1"),
        ("RUNNING", 2, "running"),
        ("FAILED", 2, "rank 1 on node 0 failed"),
    ]
    assert actions == [
        StartAttempt(1),
        StopAttempt(1, "node 0 exited with 1"),
        StartAttempt(2),
        StopAttempt(2, "node 0 exited with 1"),
    ]
    status = lc.status()
    assert (status.state, status.attempt, status.message) == (
        JobState.FAILED,
        2,
        "rank 1 on node 0 failed",
    )
    assert status.failure is not None
    assert (status.failure.rank, status.failure.attempt, status.failure.traceback) == (1, 2, "tb")
    assert lc.events[3].failure == FailureInfo(
        rank=1, node=0, attempt=1, exception="ValueError", message="boom", traceback="tb"
    )


def test_the_time_limit_counts_the_time_gpus_are_held_not_the_queue():
    policy = Policy(time_limit=10.0, max_restarts=3)
    lc, events, actions = run(
        policy,
        Tick(100.0),  # queued for 100 s: does not count
        Admitted(100.0),
        NodesUp(101.0, 1),
        Tick(109.0),
        NodeExited(104.0, 1, node=1, code=1),
        AttemptEnded(105.0, 1, {0: None, 1: 1}, BOOM),  # 5 s held
        Tick(110.0),  # 5 + 5 = 10: not over yet
        Tick(110.5),  # 10.5 > 10
        Tick(111.0),  # already stopping: no second stop
        AttemptEnded(111.2, 2, {0: None, 1: None}),
    )
    assert events[-1] == ("FAILED", 2, "timeLimit 10s exceeded")
    assert actions[-1] == StopAttempt(2, "timeLimit 10s exceeded")
    assert sum(isinstance(a, StopAttempt) for a in actions) == 2
    assert held_seconds(lc.events, now=999.0) == pytest.approx(5.0 + 6.2)
    assert lc.status().failure is None  # a time-out is not a rank's failure


def test_a_huge_or_empty_cancel_message_is_cut_or_defaulted():
    # a kubectl user writes the cancel annotation: up to 256 KiB of it must not land in events
    _, events, _ = run(Policy(readmit=True), CancelRequested(1.0, "x" * 100_000))
    assert events[-1] == ("CANCELLED", 0, "x" * MAX_CANCEL_MESSAGE)
    _, events, _ = run(Policy(), CancelRequested(1.0, ""))
    assert events[-1] == ("CANCELLED", 0, "cancelled")


def test_cancel_while_queued_or_running():
    _, events, actions = run(Policy(), CancelRequested(1.0, "cancelled by alice"))
    assert events[-1] == ("CANCELLED", 0, "cancelled by alice") and actions == []
    _, events, actions = run(
        Policy(max_restarts=5),
        Admitted(1.0),
        CancelRequested(2.0),
        CancelRequested(2.1),  # asked twice: stopped once
        AttemptEnded(3.0, 1, {0: -15}, BOOM),  # killed by the cancel, not a failure to restart
    )
    assert events[-1] == ("CANCELLED", 1, "cancelled")
    assert actions == [StartAttempt(1), StopAttempt(1, "cancelled")]


def test_observations_of_other_attempts_are_ignored():
    lc, events, _ = run(
        Policy(max_restarts=1),
        Admitted(1.0),
        NodeExited(2.0, 1, node=0, code=1),
        AttemptEnded(3.0, 1, {0: 1}, BOOM),
        AttemptEnded(3.1, 1, {0: 1}, BOOM),  # late duplicate of attempt 1
        NodesUp(3.2, 1),  # a heartbeat of attempt 1
        NodeExited(3.3, 1, node=0, code=1),
    )
    assert [e[0] for e in events] == ["QUEUED", "STARTING", "RESTARTING", "STARTING"]
    assert lc.state is JobState.STARTING and lc.attempt == 2


def test_eviction_requeues_without_counting_as_a_restart_on_a_readmitting_backend():
    lc, events, actions = run(
        Policy(max_restarts=0, readmit=True),
        Admitted(1.0),
        NodesUp(2.0, 1),
        Evicted(3.0, 1, "preempted by a higher-priority workload", preempted=True),
        Admitted(4.0),
        NodesUp(5.0, 2),
        AttemptEnded(6.0, 2, {0: 0}),
    )
    assert [(t, a) for t, a, _ in events] == [
        ("QUEUED", 0),
        ("STARTING", 1),
        ("RUNNING", 1),
        ("PREEMPTED", 1),
        ("QUEUED", 1),
        ("STARTING", 2),
        ("RUNNING", 2),
        ("SUCCEEDED", 2),
    ]
    # the readmitting backend creates each attempt's workload before its admission
    assert actions == [
        StartAttempt(1),
        StopAttempt(1, "preempted by a higher-priority workload"),
        StartAttempt(2),
    ]
    attempts = attempts_from_events(JobInfo("j", "u", None, "q", 1, 8, 0.0), lc.events)
    assert [(a.attempt, a.outcome, a.preempted) for a in attempts] == [
        (1, "PREEMPTED", True),
        (2, "SUCCEEDED", False),
    ]


def test_readmission_after_a_failure_and_cancel_of_the_waiting_attempt():
    _, events, actions = run(
        Policy(max_restarts=1, readmit=True),
        Admitted(1.0),
        AttemptEnded(2.0, 1, {0: 1}, BOOM),
        CancelRequested(3.0),
    )
    assert [e[0] for e in events] == ["QUEUED", "STARTING", "RESTARTING", "QUEUED", "CANCELLED"]
    assert actions == [StartAttempt(1), StartAttempt(2), StopAttempt(2, "cancelled")]


def test_a_lost_driver_fails_or_cancels_the_job():
    _, events, _ = run(Policy(), Admitted(1.0), Lost(2.0, "supervisor died"))
    assert events[-1] == ("FAILED", 1, "supervisor died")
    _, events, _ = run(Policy(), Lost(2.0, "cancelled", cancelled=True))
    assert events[-1] == ("CANCELLED", 0, "cancelled")


def test_a_queued_job_that_cannot_be_made_fails_once_and_starts_nothing():
    """The controller's answer to a job whose runtime an admin removed: FAILED at once with
    the reason as its failure, whichever attempt it waited for; not while one runs."""
    policy = Policy(max_restarts=3, readmit=True)
    lc, events, actions = run(policy, Unrunnable(1.0, "its runtime is gone"))
    assert events[-1] == ("FAILED", 0, "cannot start: its runtime is gone")
    assert actions == [StartAttempt(1)]  # submitted's, which the driver skips once finished
    assert lc.state is JobState.FAILED
    assert lc.status().failure == FailureInfo(attempt=0, message="its runtime is gone")
    assert lc.observe(Unrunnable(2.0, "again")).events == []  # once
    lc, events, actions = run(
        policy, Admitted(1.0), AttemptEnded(2.0, 1, {0: 1}, BOOM), Unrunnable(3.0, "gone")
    )
    assert [e[:2] for e in events[-3:]] == [("RESTARTING", 1), ("QUEUED", 1), ("FAILED", 1)]
    assert actions == [StartAttempt(1), StartAttempt(2)] and lc.restarts == 1
    lc, events, _ = run(policy, Admitted(1.0), NodesUp(2.0, 1), Unrunnable(3.0, "gone"))
    assert lc.state is JobState.RUNNING and events[-1][0] == "RUNNING"


def test_the_lifecycle_rebuilt_from_its_events_carries_on():
    lc, _, _ = run(Policy(max_restarts=2), Admitted(1.0), AttemptEnded(2.0, 1, {0: 1}, BOOM))
    again = Lifecycle.from_events(Policy(max_restarts=2), lc.events)
    assert (again.state, again.attempt, again.restarts) == (JobState.STARTING, 2, 1)
    step = again.observe(AttemptEnded(3.0, 2, {0: 1}, BOOM))
    assert [e.type for e in step.events] == [E.RESTARTING, E.STARTING]


def test_incremental_attempt_folding_equals_folding_everything():
    lc, _, _ = run(
        Policy(max_restarts=2),
        Admitted(1.0),
        NodesUp(2.0, 1),
        AttemptEnded(3.0, 1, {0: 1}, BOOM),
        NodesUp(4.0, 2),
        AttemptEnded(9.0, 2, {0: 0}),
    )
    info = JobInfo("j", "u", "t", "q", nodes=2, gpus=4, submitted=0.0)
    whole = attempts_from_events(info, lc.events)
    for cut in range(len(lc.events) + 1):
        assert (
            fold_attempts(info, attempts_from_events(info, lc.events[:cut]), lc.events[cut:])
            == whole
        )
    assert [(a.attempt, a.outcome, a.admitted, a.finished, a.queue_wait) for a in whole] == [
        (1, "RESTARTED", 1.0, 3.0, 1.0),
        (2, "SUCCEEDED", 3.0, 9.0, 0.0),
    ]
    assert sum(a.gpu_seconds(now=0.0) for a in whole) == 4 * 8.0
