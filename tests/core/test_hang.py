"""When a running attempt counts as hung, and what it reports (pure parts of aviflow.hang)."""

from __future__ import annotations

import pytest

from aviflow.hang import hang_failure, silent_ranks
from aviflow.lifecycle import Hung, Lifecycle, Policy, StopAttempt


@pytest.mark.parametrize(
    ("now", "beats", "last_step", "expected"),
    [
        # within the timeout of the attempt's start: never hung
        (130.0, {}, None, None),
        # every rank beating, no step logged yet (a job still loading): not hung
        (500.0, {0: 499.0, 1: 499.0}, None, None),
        # rank 1's beat is stale: it alone is silent
        (500.0, {0: 499.0, 1: 350.0}, None, ([1], "no heartbeat from rank(s) [1] for 1m")),
        # beats older than the attempt count from its start
        (150.0, {0: 10.0, 1: 10.0}, None, None),
        # alive, but no step for the timeout once steps were logged: every rank
        (500.0, {0: 499.0, 1: 499.0}, 400.0, ([0, 1], "no step logged for 1m (every rank alive)")),
        (500.0, {0: 499.0, 1: 499.0}, 450.0, None),
        # ranks without a watchdog (commands) are judged by nothing
        (5000.0, {}, None, None),
    ],
)
def test_silent_ranks(now, beats, last_step, expected) -> None:
    assert silent_ranks(now, 60.0, 100.0, beats, last_step, 2) == expected


def test_the_hang_failure_names_the_first_silent_rank_with_every_stack() -> None:
    stacks = {1: "File a.py, line 3\n", 2: "x"}
    f = hang_failure(2, [1, 3], "no step", stacks, gpus_per_node=2, now=120.0)
    assert (f.rank, f.node, f.attempt, f.exception, f.message) == (1, 0, 2, "Hang", "no step")
    assert f.time == 120.0
    assert f.traceback == "--- rank 1 ---\nFile a.py, line 3\n(no stacks from rank(s) [3])"


def test_a_hang_stops_the_attempt_as_a_failure_then_restarts_it() -> None:
    lc = Lifecycle(Policy(max_restarts=1, readmit=True)).submitted(0.0).lifecycle
    from aviflow.lifecycle import Admitted, AttemptEnded, NodesUp

    lc = lc.observe(Admitted(1.0)).lifecycle
    lc = lc.observe(NodesUp(2.0, 1)).lifecycle
    step = lc.observe(Hung(100.0, 1, "no step logged for 1m"))
    assert step.actions == [StopAttempt(1, "hung: no step logged for 1m")]
    assert step.lifecycle.observe(Hung(101.0, 1, "again")).actions == []  # once
    ended = step.lifecycle.observe(AttemptEnded(102.0, 1, {0: None}))
    assert [e.type.value for e in ended.events] == ["RESTARTING", "QUEUED"]
    assert ended.events[0].failure is not None
    assert ended.events[0].failure.message == "hung: no step logged for 1m"
