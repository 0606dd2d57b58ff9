"""A full run store, for real: a small tmpfs holds the store (the test runs as root, as
``make test`` does) and is filled while a local job runs.

The supervisor's records wait, in order, while the disk takes nothing; the job keeps
running and ends; once space returns, its end is recorded once, with no torn line and no
temporary file left anywhere in the store."""

from __future__ import annotations

import errno
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.records import EventType, JobState
from aviflow.store import RunDir
from aviflow_testcluster import wait_for

GATE = "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)\n"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of its own (a full disk that fills nobody else's)."""
    where = tmp_path / "disk"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root: {done.stderr}"
    try:
        yield where
    finally:
        subprocess.run(["umount", "--lazy", str(where)], check=True)


def _fill(path: Path) -> int:
    """Write ``path`` until the disk takes no more; the bytes written."""
    written, chunk = 0, b"\0" * 65536
    with path.open("wb", buffering=0) as f:
        while True:
            try:
                n = f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
            written += n or 0
            if not n:
                break
    while True:  # the last few bytes: a write the size of one line must fail too
        try:
            with path.open("ab", buffering=0) as f:
                if not f.write(b"\0"):
                    break
        except OSError:
            break
    return written


def test_a_full_store_holds_the_supervisors_records_until_space_returns(
    small_disk: Path, tmp_path: Path, leftover_processes
) -> None:
    root, gate = small_disk / "runs", tmp_path / "go"
    backend = LocalBackend(root=root, capacity=1)
    job = aviflow.submit(
        {
            "metadata": {"name": "on-a-full-disk"},
            "spec": {"command": ["python", "-c", GATE, str(gate)]},
        },
        backend=backend,
    )
    try:
        wait_for(lambda: job.status is JobState.RUNNING, 120, "the job runs")
        run = backend.run_dir(job.id)
        wait_for(lambda: run.log_tail(0, 1), 60, "the rank has started")
        filler = small_disk / "filler"
        assert _fill(filler) > 0
        gate.touch()  # the job ends now, on a full disk
        wait_for(lambda: not leftover_processes(job.id), 60, "the attempt's processes end")
        time.sleep(2)  # the supervisor has seen the end and tried to record it
        # the status file (a new file, so a new page) was not taken: still the old one; an
        # event may have been (a full disk still takes bytes in a file's last block)
        assert run.status().state is JobState.RUNNING
        assert run.supervisor_info.exists() and _alive(run)
        filler.unlink()  # space returns
        assert job.wait(timeout=60) is JobState.SUCCEEDED, run.supervisor_log.read_text()
    finally:
        (small_disk / "filler").unlink(missing_ok=True)
        gate.touch()
        backend.cancel(job.id)
    events = job.events()
    assert [e.type for e in events] == [
        EventType.QUEUED, EventType.STARTING, EventType.RUNNING, EventType.SUCCEEDED,
    ]  # fmt: skip
    lines = run.events_path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and all(line.startswith(b"{") for line in lines[:-1])
    assert [p.name for p in root.rglob("*.tmp")] == []
    log = run.supervisor_log.read_text()
    said = r"the run store was full \(No space left on device: [01] event\(s\) waited\) for \d+ s"
    assert re.search(said + "; recorded now\n$", log), log
    wait_for(lambda: not leftover_processes(job.id), 30, "no process of the job is left")


def _alive(run: RunDir) -> bool:
    pid = json.loads(run.supervisor_info.read_text())["pid"]
    return psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
