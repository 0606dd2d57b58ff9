"""A rank's stacks file stays bounded, and the driver reads the latest dump in it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aviflow.runtime import watchdog
from aviflow.runtime.env import RuntimeEnv
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore
from aviflow.store._rundir import MAX_STACK_BYTES


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    job = TrainJob.from_dict({"metadata": {"name": "t"}, "spec": {"script": "1", "gpusPerNode": 2}})
    return RunStore(tmp_path / "runs").create(job, {}, "alice")


def _stalls(run: RunDir, before: bytes) -> bytes:
    """What the watchdog's timer adds to rank 0's stacks file (already ``before``) when the
    rank is silent for longer than its 0.2 s timeout (beats are 2 s apart)."""
    path = run.stack_path(1, 0)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(before)
    dog = watchdog.Watchdog(run, RuntimeEnv(run_dir=run.path, attempt=1), 0, 0.2)
    dog.start()
    try:
        time.sleep(1.0)
    finally:
        dog.stop()
        dog.join()
    return path.read_bytes()[len(before) :]


def test_the_timer_dumps_the_stacks_of_a_silent_rank(run: RunDir) -> None:
    added = _stalls(run, b"")
    assert added.startswith(b"Timeout (0:00:00.200000)!\n")
    assert b"in _stalls" in added  # this thread's frame is in the dump


def test_the_timer_stops_once_the_file_is_long_but_the_driver_reads_the_latest(
    run: RunDir,
) -> None:
    # a rank that stalled again and again: its file holds STACKS_TIMER_BYTES of old dumps
    old = b"old dump line\n" * (watchdog.STACKS_TIMER_BYTES // 14 + 1)
    assert _stalls(run, old) == b""
    # the driver reads the file's last MAX_STACK_BYTES (it refused the whole file before)
    with run.stack_path(1, 0).open("ab") as f:
        f.write(b"=== rank 0: the latest dump ===\n")
    text = run.stacks(1, 2)[0]
    assert len(text) == MAX_STACK_BYTES
    assert text.endswith("old dump line\n=== rank 0: the latest dump ===\n")
