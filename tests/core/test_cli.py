"""The ``aviflow`` CLI, run as a user would: a separate process per command."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.records import JobState, JobStatus

TINY = Path(aviflow.__file__).parent / "examples" / "tiny_regression.py"


def cli(root: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "aviflow", "--root", str(root), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "AVIFLOW_ROOT": str(root)},
    )


def write_spec(tmp_path: Path, name: str, **spec) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "aviflow.dev/v1",
                "kind": "TrainJob",
                "metadata": {"name": name},
                "spec": spec,
            }
        )
    )
    return path


def test_bad_spec_exits_2_and_writes_nothing(tmp_path, run_root):
    path = write_spec(tmp_path, "bad", nodes=1, gpuPerNode=2, script="pass")
    result = cli(run_root, "submit", str(path))
    assert result.returncode == 2
    assert "spec.gpuPerNode: unknown key; did you mean 'gpusPerNode'?" in result.stderr
    assert not run_root.exists()


def test_a_spec_file_that_is_not_utf8_exits_2_with_one_line(tmp_path, run_root):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"metadata:\n  name: caf\xe9\nspec:\n  script: pass\n")
    result = cli(run_root, "submit", str(path))
    assert result.returncode == 2
    assert result.stderr == (
        f"aviflow: invalid TrainJob spec: {path} is not UTF-8 text (byte 21: b'\\xe9'); "
        "save it as UTF-8\n"
    )
    assert not run_root.exists()


def test_unknown_job_exits_4(run_root):
    result = cli(run_root, "status", "nope-00000000")
    assert result.returncode == 4
    assert "no job 'nope-00000000'" in result.stderr


@pytest.mark.training
def test_submit_detached_then_follow_with_every_command(tmp_path, run_root, leftover_processes):
    # --- a job submitted without --wait outlives the CLI process that submitted it
    (tmp_path / "train.py").write_text(TINY.read_text())
    path = write_spec(
        tmp_path,
        "cli-job",
        nodes=2,
        gpusPerNode=1,
        scriptFile="train.py",
        env={"TINY_STEPS": "12", "TINY_CKPT_EVERY": "6"},
    )
    submitted = cli(run_root, "submit", str(path))
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    job = aviflow.get(job_id, backend=LocalBackend(root=run_root))
    assert job.wait(timeout=420) == JobState.SUCCEEDED, job.logs(tail=40)

    listing = cli(run_root, "ls").stdout.splitlines()
    assert listing[0].split() == ["ID", "NAME", "STATE", "NODES", "GPUS", "SUBMITTED", "START"]
    assert listing[1].split()[:5] == [job_id, "cli-job", "SUCCEEDED", "2", "2"]

    status = cli(run_root, "status", job_id)
    assert status.returncode == 0
    assert json.loads(status.stdout)["state"] == "SUCCEEDED"

    metrics = cli(run_root, "metrics", job_id, "--csv")
    rows = list(csv.DictReader(io.StringIO(metrics.stdout)))
    assert [int(r["step"]) for r in rows] == list(range(1, 13))
    assert set(rows[0]) == {"step", "time", "attempt", "loss"}

    logs = cli(run_root, "logs", job_id, "--rank", "0", "--tail", "1")
    assert logs.stdout == "done\n"
    followed = cli(run_root, "logs", job_id, "-f")
    assert "[rank 1] === attempt 1 rank 1" in followed.stdout

    usage = cli(run_root, "usage").stdout.splitlines()
    assert usage[1].split()[:5] == [job_id, "cli-job", "SUCCEEDED", "2", "1"]
    assert float(usage[1].split()[5]) == pytest.approx(job.usage().gpu_seconds, abs=0.05)

    cancelled = cli(run_root, "cancel", job_id)
    assert cancelled.stdout.strip() == f"{job_id} had already finished (SUCCEEDED)"
    assert leftover_processes(job_id) == []


@pytest.mark.training
def test_wait_reports_progress_and_exit_code_of_a_failed_job(tmp_path, run_root):
    path = write_spec(
        tmp_path,
        "failing",
        nodes=2,
        gpusPerNode=1,
        script="import sys\nprint('about to fail')\nraise SystemExit(3)\n",
    )
    result = cli(run_root, "submit", str(path), "--wait")
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    job_id = lines[0]
    assert any(
        f"{job_id} QUEUED: waiting for" in line or f"{job_id} STARTING" in line
        for line in lines[1:]
    )
    assert f"{job_id} FAILED" in lines
    assert (
        "first failure: rank 0 on node 0: SystemExit: 3" in result.stderr
        or "first failure: rank 1 on node 1: SystemExit: 3" in result.stderr
    )
    assert "SystemExit(3)" in result.stderr


def test_wait_progress_says_what_a_queued_job_waits_for(capsys):
    from types import SimpleNamespace

    from aviflow.cli import _progress_printer
    from aviflow.records import MetricRow

    logged = [[], [], [MetricRow(7, 1.0, 2, {"loss": 0.25})], []]
    cursors = []

    def metric_batch(since: int) -> tuple[list[MetricRow], int]:
        cursors.append(since)
        return logged[len(cursors) - 1], since + len(logged[len(cursors) - 1])

    job = SimpleNamespace(id="j-1", metric_batch=metric_batch)
    show = _progress_printer()
    reason = "waiting for queue 'vision' quota: needs 2 GPUs, 2/2 in use (position 1)"
    show(job, JobStatus(JobState.QUEUED, 0, reason, queue_position=1))
    show(job, JobStatus(JobState.QUEUED, 0, reason, queue_position=1))  # unchanged: silent
    show(job, JobStatus(JobState.RUNNING, 2, "running"))
    show(job, JobStatus(JobState.RUNNING, 2, "running"))  # no new rows: the last ones stay
    lines = [ln.split("] ", 1)[1] for ln in capsys.readouterr().out.splitlines()]
    assert lines == [f"j-1 QUEUED: {reason}", "j-1 RUNNING attempt 2  step 7: loss=0.25"]
    assert cursors == [0, 0, 0, 1]  # each read continues where the last one ended


def test_refused_submission_exits_5_and_a_wait_that_times_out_exits_124(
    tmp_path, run_root, leftover_processes
):
    too_big = write_spec(tmp_path, "huge", nodes=4, gpusPerNode=4, script="pass\n")
    refused = cli(run_root, "submit", str(too_big))
    assert refused.returncode == 5, refused.stderr
    assert refused.stderr.startswith("aviflow: 'huge' needs 16 GPU slots (4 nodes x 4)")
    assert LocalBackend(root=run_root).list_ids() == []

    slow = write_spec(tmp_path, "slow", command=["python", "-c", "import time; time.sleep(600)"])
    waited = cli(run_root, "submit", str(slow), "--wait", "--timeout", "2")
    assert waited.returncode == 124, waited.stderr
    job_id = waited.stdout.splitlines()[0]
    assert f"aviflow: job {job_id} is still " in waited.stderr
    assert aviflow.get(job_id, LocalBackend(root=run_root)).cancel() is True
    assert leftover_processes(job_id) == []


def test_images_lists_the_backends_trainer_images(run_root):
    from importlib import metadata

    result = cli(run_root, "images")
    assert result.returncode == 0, result.stderr
    torch, acc, avi = (metadata.version(n) for n in ("torch", "accelerate", "aviflow"))
    assert result.stdout.split("\n")[1].split() == ["local", "(default)", "-", "-", torch, acc, avi]
    assert result.stdout.split()[:6] == ["NAME", "IMAGE", "LOCK", "TORCH", "ACCELERATE", "AVIFLOW"]
