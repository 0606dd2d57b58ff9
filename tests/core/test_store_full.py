"""A full run store, for real: a small tmpfs holds the store (the test runs as root, as
``make test`` does) and is filled while a local job runs.

The supervisor's records wait, in order, while the disk takes nothing; the job keeps
running and ends; once space returns, its end is recorded once, with no torn line and no
temporary file left anywhere in the store."""

from __future__ import annotations

import errno
import getpass
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.records import EventType, JobState
from aviflow.store import RunDir, atomic_write
from aviflow_testcluster import wait_for

GATE = "import pathlib, sys, time\nwhile not pathlib.Path(sys.argv[1]).exists(): time.sleep(0.05)\n"


def _stale_disks() -> list[str]:
    """This fixture's tmpfs mounts left by a pytest run that was killed before its teardown:
    under a numbered base dir whose ``.lock`` (pytest's, holding the run's pid) is gone or
    names a dead process. A live run's disk is not one of them."""
    stale = []
    for line in Path("/proc/mounts").read_text().splitlines():
        _, point, fstype, *_ = line.split()
        found = re.match(r"(/.+/pytest-of-[^/]+/pytest-\d+)/.+/disk$", point)
        if fstype != "tmpfs" or not found:
            continue
        lock = Path(found[1]) / ".lock"
        pid = lock.read_text().strip() if lock.exists() else ""
        if not (pid.isdigit() and psutil.pid_exists(int(pid))):
            stale.append(point)
    return stale


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MiB tmpfs of its own (a full disk that fills nobody else's); first unmounts any
    left by a killed run (:func:`_stale_disks`)."""
    for point in _stale_disks():
        subprocess.run(["umount", "--lazy", point], check=False)
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
    assert [e.type for e in events if e.type is not EventType.USAGE] == [
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


# -- what a job's own processes write: they train on through a full store -------------------
def test_a_batch_of_events_lands_whole_or_not_at_all(tmp_path: Path, monkeypatch) -> None:
    """RESTARTING without its QUEUED would leave a job the controller cannot go on with: a
    disk that takes the first line of a batch but not the second keeps neither."""
    from aviflow.records import Event
    from aviflow.store import _files

    run = RunDir(tmp_path)
    run.append_event(Event(EventType.QUEUED, 0, "", 1.0))
    before = run.events_path.read_bytes()
    short = SimpleNamespace(**vars(os))  # this module's os, whose writes take 90 bytes
    short.write = lambda fd, data: os.write(fd, bytes(data)[:90])
    monkeypatch.setattr(_files, "os", short)
    batch = [
        Event(EventType.RESTARTING, 1, "rank 0 failed", 2.0),
        Event(EventType.QUEUED, 1, "", 2.0),
    ]
    with pytest.raises(OSError, match="nothing appended") as raised:
        run.append_events(batch)
    assert raised.value.errno == errno.ENOSPC
    assert run.events_path.read_bytes() == before
    monkeypatch.setattr(_files, "os", os)
    run.append_events(batch)
    assert [e.type for e in run.events().items] == [EventType.QUEUED, *[e.type for e in batch]]


def test_a_ranks_output_on_a_full_disk_is_dropped_counted_and_said(tmp_path: Path) -> None:
    from aviflow.runtime._output import LogWriter

    full = os.open("/dev/full", os.O_WRONLY)
    log = tmp_path / "rank-0.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        writer = LogWriter(full)
        assert writer.write(b"lost line\n") == 10 and writer.lost == 10
        writer.fd = fd  # space returns
        assert writer.write(b"next\n") == 5 and writer.lost == 0
    finally:
        os.close(full)
        os.close(fd)
    assert log.read_text() == (
        "[aviflow: 10 bytes of output lost here: the run store was full]\nnext\n"
    )
    # a rank's print on a full disk: the training goes on (it raised ENOSPC before)
    script = (
        "from pathlib import Path\nfrom aviflow.runtime._output import redirect_output\n"
        "redirect_output(Path('/dev/full'), 'header\\n')\n"
        "for i in range(100):\n    print('x' * 1000)\n"
        "import sys; sys.stderr.write('error\\n'); sys.stdout.flush()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_metric_rows_wait_in_order_while_the_store_is_full(tmp_path: Path, monkeypatch) -> None:
    from aviflow import tracking

    monkeypatch.delenv("AVIFLOW_RUN_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tracking, "_HELD", tracking._HeldRows())
    real, full = RunDir.append_metric, [False]

    def append_metric(self: RunDir, row) -> None:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, row)

    monkeypatch.setattr(RunDir, "append_metric", append_metric)
    aviflow.log({"loss": 1.0}, step=1)
    full[0] = True
    for step in (2, 3, 4):
        aviflow.log({"loss": 1.0 / step}, step=step)  # no error: the training goes on
    assert tracking.flush() is False
    full[0] = False
    aviflow.log({"loss": 0.2}, step=5)
    path = tmp_path / ".aviflow" / "run" / "metrics.jsonl"
    assert [json.loads(x)["step"] for x in path.read_text().splitlines()] == [1, 2, 3, 4, 5]
    assert tracking.flush() is True


def test_a_checkpoint_on_a_full_store_is_skipped_and_the_training_goes_on(
    small_disk: Path, monkeypatch
) -> None:
    import torch
    from accelerate import Accelerator

    from aviflow import tracking

    monkeypatch.delenv("AVIFLOW_RUN_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(small_disk)
    accelerator = Accelerator(cpu=True)
    accelerator.prepare(torch.nn.Linear(256, 256))
    assert aviflow.save_checkpoint(accelerator, 1) is not None
    filler = small_disk / "filler"
    assert _fill(filler) > 0
    assert aviflow.save_checkpoint(accelerator, 2) is None  # torch.save's error names no errno
    run = tracking.run_dir()
    assert [c.step for c in run.checkpoints()] == [1]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == [
        run.checkpoint_dir(1).name
    ]  # nothing half written is left
    filler.unlink()
    assert aviflow.save_checkpoint(accelerator, 3) is not None
    assert [c.step for c in run.checkpoints()] == [1, 3]


def test_out_of_space_reads_wrapped_errors_and_the_disk(small_disk: Path, tmp_path: Path) -> None:
    from aviflow.store import out_of_space

    wrapped = RuntimeError("saving")
    wrapped.__context__ = OSError(errno.ENOSPC, "No space left on device")
    said = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    for exc in (OSError(errno.EDQUOT, "Disk quota exceeded"), wrapped, said):
        assert out_of_space(exc, tmp_path), exc
    mute = RuntimeError("[enforce fail at inline_container.cc:671] . unexpected pos 576 vs 534")
    assert not out_of_space(mute, small_disk)  # room left: not a full disk
    _fill(small_disk / "filler")
    assert out_of_space(mute, small_disk)
    assert not out_of_space(ValueError("bad"), tmp_path)


# -- hang judgment on a full store ---------------------------------------------------------------
def test_hang_judgment_waits_while_the_store_is_full_and_a_timeout_after(small_disk: Path) -> None:
    """The driver's side (the local supervisor's and the controller's ``watch_hang``), on a
    really full disk: a rank silent since long before is not judged while the store is
    full, nor within a hang timeout after it takes bytes again (its rows and beats wait in
    memory until then); only a silence past that is a hang. Each change is said once."""
    from aviflow import driving, hang

    run = RunDir(small_disk / "runs" / "alice" / "job-1")
    run.heartbeats_dir.mkdir(parents=True)
    atomic_write(run.rank_heartbeat_path(1, 0), json.dumps({"time": 1000.0}))
    run.metrics_path.write_text('{"step": 1}\n')
    os.utime(run.metrics_path, (1000.0, 1000.0))
    said: list[str] = []
    outages = driving.Outages(said.append)

    def judge(now: float) -> object:
        return driving.watch_hang(run, 1, 10.0, 900.0, 1, 1, now, outages)

    filler = small_disk / "filler"
    _fill(filler)
    assert [judge(t) for t in (1050.0, 1100.0, 1200.0)] == [None] * 3
    assert run.stacks_requested(1) is None
    filler.unlink()  # space returns at 1300: the rank has not beaten nor logged since 1000
    assert [judge(t) for t in (1300.0, 1305.0, 1310.0)] == [None] * 3
    assert run.stacks_requested(1) is None  # within the grace: not even suspected
    assert judge(1310.5) is None and run.stacks_requested(1) == 1310.5  # silent past it
    hung = judge(1310.5 + hang.STACK_WAIT)
    assert hung is not None and hung.message == "no heartbeat from rank(s) [0] for 10s"
    assert said == [
        "job job-1: hang judgment of attempt 1 suspended: the run store is full, so the "
        "ranks' heartbeats and steps cannot be written",
        "job job-1: hang judgment of attempt 1 resumes: the run store takes bytes again "
        "after 250 s; the ranks have 10s to beat and log a step",
    ]


TRAINS = (
    "import os, pathlib, time\nimport aviflow\nstep = 0\n"
    "while not pathlib.Path(os.environ['GATE']).exists():\n"
    "    step += 1\n    aviflow.log({'loss': 1.0 / step}, step=step)\n    time.sleep(0.5)\n"
)
HANG_TIMEOUT = 6.0  # seconds


def test_a_full_store_longer_than_the_hang_timeout_is_no_hang(
    small_disk: Path, tmp_path: Path, leftover_processes
) -> None:
    """A rank whose heartbeats and metric rows cannot be written while the store is full is
    not hung: the supervisor suspends its hang judgment (and says so) until the store takes
    bytes again and the ranks have had a hang timeout to beat again; no restart is burnt."""
    root, gate = small_disk / "runs", tmp_path / "go"
    backend = LocalBackend(root=root, capacity=1)
    job = aviflow.submit(
        {
            "metadata": {"name": "beats-on-a-full-disk"},
            "spec": {
                "script": TRAINS,
                "env": {"GATE": str(gate)},
                "hangTimeout": f"{HANG_TIMEOUT:.0f}s",
                "maxRestarts": 1,
            },
        },
        backend=backend,
    )
    run = backend.run_dir(job.id)
    filler = small_disk / "filler"
    try:
        wait_for(lambda: len(job.metric_rows()) >= 3, 120, "the rank logs steps")
        wait_for(lambda: run.rank_beats(1, 1), 30, "the rank beats")
        assert _fill(filler) > 0
        time.sleep(2.5 * HANG_TIMEOUT)  # no beat and no step written all along
        assert run.hang(1) is None and run.stacks_requested(1) is None
        assert len(leftover_processes(job.id)) > 0
        filler.unlink()  # space returns
        steps = len(job.metric_rows())
        wait_for(lambda: len(job.metric_rows()) >= steps + 3, 60, "steps after the outage")
        time.sleep(HANG_TIMEOUT)  # the judgment resumes: still no hang
        gate.touch()
        assert job.wait(timeout=60) is JobState.SUCCEEDED, run.supervisor_log.read_text()
    finally:
        filler.unlink(missing_ok=True)
        gate.touch()
        backend.cancel(job.id)
    assert [e.type for e in job.events()] == [
        EventType.QUEUED, EventType.STARTING, EventType.RUNNING, EventType.SUCCEEDED,
    ]  # fmt: skip
    rows = [r["step"] for r in job.metric_rows()]
    assert rows == list(range(1, len(rows) + 1))  # every step, once: the rows waited
    log = run.supervisor_log.read_text()
    suspended = re.findall(r"hang judgment of attempt 1 suspended: the run store is full", log)
    resumed = re.findall(r"hang judgment of attempt 1 resumes", log)
    # (the first line is said while the disk takes none, so it may be lost; the second says
    # how long the store was full)
    assert (len(suspended) <= 1, len(resumed)) == (True, 1), log
    wait_for(lambda: not leftover_processes(job.id), 30, "no process of the job is left")


# -- a submission on a store that fills as it is made -----------------------------------------------
@pytest.mark.parametrize("before", [0, 1], ids=["first-job", "after-another"])
def test_a_store_that_fills_just_after_the_rename_refuses_the_submission_whole(
    small_disk: Path, monkeypatch, before: int
) -> None:
    """The disk fills just after the job's directory is renamed into place: the index line
    (a new file on a fresh store), or else the job's first events, cannot be written. The
    submission is refused (ENOSPC) and nothing of it is left: no directory, index entry,
    pending mark or staging directory; the store lists what it listed before."""
    from aviflow.spec import TrainJob
    from aviflow.store import _runstore

    root, filler = small_disk / "runs", small_disk / "filler"
    backend = LocalBackend(root=root, capacity=1)
    spec = {"metadata": {"name": "fills"}, "spec": {"command": ["true"]}}
    user = getpass.getuser()
    earlier = [backend.store.create(TrainJob.from_dict(spec), {}, user).id for _ in range(before)]
    fills = SimpleNamespace(**vars(os))

    def rename(src: Any, dst: Any) -> None:
        os.rename(src, dst)
        if Path(dst).parent.parent == root:  # the job's directory, in place
            _fill(filler)

    fills.rename = rename
    monkeypatch.setattr(_runstore, "os", fills)
    with pytest.raises(OSError) as refused:
        aviflow.submit(spec, backend=backend)
    assert refused.value.errno == errno.ENOSPC, refused.value
    monkeypatch.setattr(_runstore, "os", os)
    filler.unlink()
    assert backend.list_ids() == earlier
    assert sorted(p.name for p in (root / user).iterdir()) == sorted(earlier)
    assert sorted(p.name for p in backend.store.index_dir.iterdir()) == sorted(earlier)
    assert [p.name for p in root.rglob("*") if p.name.startswith(".staging-")] == []
    assert [p.name for p in root.rglob("*.tmp")] == []
    assert not any(backend.store.pending_dir.glob("*"))
