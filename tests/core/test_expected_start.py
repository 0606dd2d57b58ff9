"""A waiting job's expected start on the local backend: in its status, its dry run and the
CLI, moving when the job ahead ends, and "never" where no empty machine could hold it."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import aviflow
from aviflow.attempts import held_seconds
from aviflow.backends.local import LocalBackend
from aviflow.estimate import WaitNumbers
from aviflow.records import EventType, JobState
from aviflow.spec import TrainJob


def _job(name: str, gate: Path | None, time_limit: str | None, gpus: int = 2) -> dict:
    wait = f"while not os.path.exists({str(gate)!r}): time.sleep(0.1)" if gate else "pass"
    spec = {
        "queue": "vision",
        "gpusPerNode": gpus,
        "command": ["python", "-c", f"import os, time\n{wait}\n"],
    }
    if time_limit:
        spec["timeLimit"] = time_limit
    return {"apiVersion": "aviflow.dev/v1", "kind": "TrainJob", "metadata": {"name": name},
            "spec": spec}  # fmt: skip


def _wait_for(pred, timeout: float = 120):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (found := pred()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
    return found


def test_a_queued_job_knows_when_it_will_start_and_a_dry_run_too(
    run_root: Path, tmp_path: Path, leftover_processes
) -> None:
    backend = LocalBackend(root=run_root, capacity=8, quotas={"vision": 2})
    gate = tmp_path / "release"
    first = aviflow.submit(_job("first", gate, "10m"), backend=backend)
    _wait_for(lambda: first.status is JobState.RUNNING)
    second = aviflow.submit(_job("second", None, "5m"), backend=backend)
    record = _wait_for(
        lambda: (r := second.status_record()).expected_start is not None and r, timeout=60
    )
    # the first job releases its 2 GPUs by its time limit at the latest: 10 minutes after it
    # started holding them (any moment before: no progress or history to say more)
    now = time.time()
    first_end = now + 600 - held_seconds(first.events(), now)
    est = record.expected_start
    assert record.state is JobState.QUEUED and est.never is None and not est.now
    assert est.high == pytest.approx(first_end, abs=0.5)
    assert record.updated <= est.low <= est.high
    assert record.wait == WaitNumbers("vision", quota=2, holds=2, borrowed=0, lendable=0,
                                      ahead=0, ahead_gpus=0)  # fmt: skip
    assert "else by their time limit" in est.assumed[1]

    # a dry run: behind both, by the second's time limit after the first's end at the latest
    third = TrainJob.from_dict(_job("third", None, "1m"))
    dry = backend.forecast(third)
    assert dry is not None and dry.high == pytest.approx(first_end + 300, abs=0.5)
    assert backend.summaries() and len(backend.summaries()) == 2  # it created nothing
    big = TrainJob.from_dict(_job("big", None, None, gpus=4))
    assert backend.forecast(big).never == (  # type: ignore[union-attr]
        "needs 4 GPUs; queue 'vision' may hold at most 2 (its quota, 2, and no cohort to "
        "borrow from)"
    )
    # the CLI's dry run says it above the objects it would create
    path = tmp_path / "third.yaml"
    path.write_text(yaml.safe_dump(third.to_dict()))
    out = subprocess.run(
        [sys.executable, "-m", "aviflow", "--root", str(run_root), "submit", str(path),
         "--dry-run"], capture_output=True, text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    # now, or by the end of both time limits (15m at most; a second or two have passed)
    assert re.fullmatch(
        r"# expected to start in about [78]m \(between 0s and 1[45]m from now\)",
        out.splitlines()[0],
    ), out.splitlines()[0]
    assert len(list(yaml.safe_load_all(out))) == 1  # what its one node would run

    # the job ahead ends: the second starts, within its estimate
    gate.touch()
    assert first.wait(timeout=120) == JobState.SUCCEEDED
    assert second.wait(timeout=120) == JobState.SUCCEEDED
    started = next(e.time for e in second.events() if e.type is EventType.STARTING)
    assert est.low <= started <= est.high
    assert second.status_record().expected_start is None  # only while queued
    assert [leftover_processes(j.id) for j in (first, second)] == [[], []]
