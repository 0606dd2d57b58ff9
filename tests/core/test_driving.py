"""The driver's reads and writes for an attempt (aviflow.driving), shared by the local
supervisor and the controller, on a real job directory."""

from __future__ import annotations

import json
import os
from pathlib import Path

from aviflow import driving
from aviflow.hang import STACK_WAIT
from aviflow.records import FailureInfo
from aviflow.store import RunDir, atomic_write


def _run(tmp_path: Path) -> RunDir:
    run = RunDir(tmp_path / "alice" / "job-1")
    run.heartbeats_dir.mkdir(parents=True)
    run.failures_dir.mkdir(parents=True)
    return run


def test_a_silent_rank_is_asked_for_its_stacks_then_declared_hung_once(tmp_path: Path) -> None:
    run = _run(tmp_path)
    for rank, beat in ((0, 1095.0), (1, 1000.0)):  # rank 1 silent since 1000
        atomic_write(run.rank_heartbeat_path(1, rank), json.dumps({"time": beat}))

    def judge(now: float) -> FailureInfo | None:
        return driving.watch_hang(run, 1, 10.0, 900.0, world=2, gpus_per_node=2, now=now)

    assert judge(1005.0) is None and run.stacks_requested(1) is None  # within its timeout
    assert judge(1011.0) is None and run.stacks_requested(1) == 1011.0  # suspected: asked
    assert judge(1012.0) is None  # waits for the stacks...
    run.stack_path(1, 1).write_text("File train.py, line 9\n")
    hung = judge(1013.0)  # ... until the silent rank's came
    assert hung == FailureInfo(
        rank=1, node=0, attempt=1, exception="Hang",
        message="no heartbeat from rank(s) [1] for 10s",
        traceback="--- rank 1 ---\nFile train.py, line 9", time=1013.0,
    )  # fmt: skip
    assert run.hang(1) == hung  # recorded: the attempt's failure from now on
    assert judge(5000.0) == hung


def test_stacks_that_never_come_are_waited_for_stack_wait_seconds(tmp_path: Path) -> None:
    run = _run(tmp_path)
    run.metrics_path.write_text('{"step": 1}\n')
    os.utime(run.metrics_path, (950.0, 950.0))  # a step in this attempt, then none
    atomic_write(run.rank_heartbeat_path(2, 0), json.dumps({"time": 2000.0}))
    assert driving.watch_hang(run, 2, 10.0, 900.0, 1, 1, now=961.0) is None
    assert driving.watch_hang(run, 2, 10.0, 900.0, 1, 1, now=961.0 + STACK_WAIT - 1) is None
    hung = driving.watch_hang(run, 2, 10.0, 900.0, 1, 1, now=961.0 + STACK_WAIT)
    assert hung is not None and hung.message == "no step logged for 10s (every rank alive)"
    assert hung.traceback == "(no stacks from rank(s) [0])"


def test_the_attempt_failure_is_its_declared_one_else_the_first_of_its_ranks(
    tmp_path: Path,
) -> None:
    run = _run(tmp_path)
    asked: list[str] = []

    def node_log(node: int) -> str:
        asked.append(f"node {node}")
        return f"node {node} said goodbye\n"

    def rank_tail(rank: int) -> str:
        asked.append(f"rank {rank}")
        return f"rank {rank} printed this\n"

    assert driving.nothing_failed(run, 1, {0: 0, 1: None})
    for rank, exc, at in ((3, "RuntimeError", 5.0), (1, "DistBackendError", 4.0), (9, "X", 1.0)):
        run.write_failure(FailureInfo(rank=rank, attempt=1, exception=exc, time=at))
    assert not driving.nothing_failed(run, 1, {0: 0, 1: 0})  # records alone: a failure
    failure = driving.attempt_failure(run, 1, {0: 1, 1: 1}, 4, 2, node_log, rank_tail)
    # rank 9 is none of the job's 4: the job's invention, left out; the communication
    # error of rank 1 is a consequence of rank 3's failure
    assert failure == FailureInfo(
        rank=3, node=1, attempt=1, exception="RuntimeError", log_tail="rank 3 printed this\n",
        time=5.0,
    )  # fmt: skip
    assert asked == ["node 0", "node 1", "rank 1", "rank 3"]
    declared = FailureInfo(attempt=1, message="cannot start: ImagePullBackOff")
    run.write_hang(declared)
    asked.clear()
    assert driving.attempt_failure(run, 1, {0: 1}, 4, 2, node_log, rank_tail) == declared
    assert asked == []  # no log is read for it
    assert not driving.nothing_failed(run, 1, {0: None})
