"""A job's directory as its code could leave it, read by the platform: symlinks (absolute,
relative, dangling, to another user's run, to the index, to a secret, on directories), FIFOs,
files too large to read whole, and records of the wrong types. Each read is refused at once,
skipped, or bounded, exactly; no writer follows a symlink. Every test runs twice: with
``openat2`` and with the per-component fallback."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aviflow.backends.local import LocalBackend
from aviflow.errors import JobNotFound, RequestError, UnsafeJobFile
from aviflow.records import CheckpointRef, Event, EventType, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import (
    CHECKPOINT_MARKER,
    MAX_LINES_READ,
    RunDir,
    RunStore,
    _files,
    atomic_write,
    checkpoint_name,
    read_lines,
)

SECRET = "token-of-the-service-0123456789"


@pytest.fixture(params=["openat2", "per-component"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    _files.use_openat2(request.param == "openat2")
    yield request.param
    _files.use_openat2(True)


@pytest.fixture
def store(tmp_path: Path, resolver: str) -> RunStore:
    return RunStore(tmp_path / "runs")


def make(store: RunStore, user: str = "alice", nodes: int = 1, gpus: int = 2) -> RunDir:
    job = TrainJob.from_dict(
        {"metadata": {"name": "t"}, "spec": {"script": "1", "nodes": nodes, "gpusPerNode": gpus}}
    )
    return store.create(job, {}, user, team="team-a")


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    path = tmp_path / "secret-token"
    path.write_text(SECRET + "\n")
    return path


def within(seconds: float, fn: Callable[[], Any]) -> Any:
    """``fn()``, failing the test if it does not return within ``seconds`` (a FIFO blocks)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds}s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_symlinked_rank_logs_are_refused_whatever_they_point_at(
    store: RunStore, secret: Path
) -> None:
    run, other = make(store), make(store, "bob")
    other.rank_log(0).write_text("bob's private output\n")
    targets = {
        0: str(secret),  # absolute, a secret of the service
        1: "../../../.ids.jsonl",  # relative, the store's index
    }
    for rank, target in targets.items():
        os.symlink(target, run.rank_log(rank))
    os.symlink(f"../../../bob/{other.id}/logs/rank-0.log", run.logs_dir / "rank-2.log")
    os.symlink("/nonexistent/dangling", run.logs_dir / "rank-3.log")
    for rank in range(4):
        with pytest.raises(UnsafeJobFile, match="symlink") as refused:
            run.log(rank, tail=10)
        assert f"rank {rank}'s log" in str(refused.value)
        with pytest.raises(UnsafeJobFile):
            run.log(rank, offset=0)
        assert run.log_tail(rank, 40) == ""
    assert SECRET in secret.read_text()  # read by nobody, changed by nobody


def test_a_symlinked_directory_is_never_entered(store: RunStore, secret: Path) -> None:
    run, other = make(store), make(store, "bob")
    other.rank_log(0).write_text("bob's private output\n")
    (other.checkpoint_dir(5)).mkdir()
    (other.checkpoint_dir(5) / CHECKPOINT_MARKER).write_text(json.dumps({"step": 5}))
    for sub in ("logs", "checkpoints", "heartbeats", "failures"):
        (run.data_dir / sub).rmdir()
        os.symlink(other.data_dir / sub, run.data_dir / sub)
    (other.failures_dir / "attempt-1-rank-0.json").write_text(
        json.dumps({"rank": 0, "attempt": 1, "exception": "ValueError", "message": "bob's"})
    )
    assert run.ranks() == [] and run.checkpoints() == [] and run.failures() == []
    with pytest.raises(UnsafeJobFile, match="symlink"):
        run.log(0, tail=5)
    assert run.heartbeat(0) == {}
    # a symlinked checkpoint directory inside a real checkpoints/ is not a checkpoint either
    (run.data_dir / "checkpoints").unlink()
    run.checkpoints_dir.mkdir()
    os.symlink(other.checkpoint_dir(5), run.checkpoint_dir(5))
    assert run.checkpoints() == []
    with pytest.raises(JobNotFound):
        store.checkpoint_path(CheckpointRef(run.id, 5))


def test_fifos_and_devices_are_refused_at_once(store: RunStore) -> None:
    run = make(store)
    os.mkfifo(run.rank_log(0))
    os.mkfifo(run.metrics_path)
    os.mkfifo(run.heartbeat_path(0))
    os.mkfifo(run.failures_dir / "attempt-1-rank-0.json")
    os.symlink("/dev/zero", run.rank_log(1))
    with pytest.raises(UnsafeJobFile, match="not a regular file"):
        within(5, lambda: run.log(0, tail=10))
    with pytest.raises(UnsafeJobFile, match="symlink"):
        within(5, lambda: run.log(1, tail=10))
    assert within(5, lambda: run.metrics()).items == []
    assert within(5, lambda: run.heartbeat(0)) == {}
    assert within(5, lambda: run.failures()) == []
    with pytest.raises(UnsafeJobFile, match="not a regular file"):
        within(5, lambda: read_lines(run.metrics_path, beneath=run.path))


def test_writers_never_follow_a_symlink(store: RunStore, secret: Path) -> None:
    run = make(store)
    os.symlink(secret, run.metrics_path)
    with pytest.raises(UnsafeJobFile):
        run.append_metric(MetricRow(step=1, time=1.0, attempt=1, values={"loss": 1.0}))
    os.symlink(secret, run.events_path)
    with pytest.raises(UnsafeJobFile):
        run.append_event(Event(EventType.QUEUED, 1.0))
    # a file replaced whole replaces the link, never what it points at
    os.symlink(secret, run.status_path)
    run.write_status(run.status())
    assert not run.status_path.is_symlink() and secret.read_text() == SECRET + "\n"
    # a write below a symlinked directory is refused, and leaves no temporary file anywhere
    elsewhere = secret.parent / "elsewhere"
    elsewhere.mkdir()
    (run.data_dir / "heartbeats").rmdir()
    os.symlink(elsewhere, run.data_dir / "heartbeats")
    with pytest.raises(UnsafeJobFile):
        run.write_heartbeat(0, {"time": 1.0})
    assert list(elsewhere.iterdir()) == []
    assert secret.read_text() == SECRET + "\n"
    assert not [p for p in run.path.rglob("*.tmp")]


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path, resolver: str) -> None:
    target = tmp_path / "status.json"
    target.mkdir()  # os.replace of a file over a directory fails
    with pytest.raises(OSError):
        atomic_write(target, "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status.json"]


def test_records_too_large_are_not_read(store: RunStore) -> None:
    run = make(store)
    big = json.dumps({"time": 1.0, "pad": "x" * (2 << 20)})
    run.heartbeat_path(0).write_text(big)
    assert run.heartbeat(0) == {}
    (run.checkpoint_dir(1)).mkdir()
    (run.checkpoint_dir(1) / CHECKPOINT_MARKER).write_text(
        json.dumps({"step": 1, "pad": "x" * (2 << 20)})
    )
    assert run.checkpoints() == []


def test_metric_reads_are_bounded_and_skip_a_line_longer_than_a_read(store: RunStore) -> None:
    run = make(store)
    good = json.dumps({"step": 1, "time": 1.0, "attempt": 1, "values": {"loss": 0.5}})
    huge = json.dumps({"step": 2, "time": 2.0, "values": {"pad": "x" * (MAX_LINES_READ + 10)}})
    last = json.dumps({"step": 3, "time": 3.0, "attempt": 1, "values": {"loss": 0.25}})
    run.metrics_path.write_text(f"{good}\n{huge}\n{last}\n")
    size = run.metrics_path.stat().st_size
    steps, cursor, more = [], 0, []
    while not more or more[-1]:
        batch = run.metrics(cursor)
        assert batch.next > cursor and batch.next - cursor <= MAX_LINES_READ + 1
        steps += [m.step for m in batch.items]
        cursor = batch.next
        more.append(batch.more)
    assert steps == [1, 3] and cursor == size and more == [True, True, False]


def test_metric_rows_and_markers_with_wrong_types_are_skipped(
    store: RunStore, caplog: pytest.LogCaptureFixture
) -> None:
    run = make(store)
    rows = [
        {"step": "5", "time": 1.0, "values": {"loss": 1.0}},
        {"step": True, "time": 1.0, "values": {"loss": 1.0}},
        {"step": 1.5, "time": 1.0, "values": {"loss": 1.0}},
        {"step": 6, "time": "now", "values": {"loss": 1.0}},
        {"step": 7, "time": 1.0, "attempt": "<b>", "values": {"loss": 1.0}},
        {"step": 8, "time": 1.0, "values": ["loss"]},
        {
            "step": 9,
            "time": 9.0,
            "values": {"loss": 0.5, "nan": float("inf"), "k" * 201: 1.0, "note": "ok", "d": {}},
        },
    ]
    run.metrics_path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert run.metrics().items == [
        MetricRow(step=9, time=9.0, attempt=1, values={"loss": 0.5, "note": "ok"})
    ]
    markers = {
        1: {"step": "1"},
        2: {"step": True},
        3: {"step": 3, "attempt": "<img src=x onerror=alert(1)>"},
        4: {"step": 4, "time": "yesterday"},
        5: {"step": 5, "attempt": 0},
        6: {"step": 6, "attempt": 2, "time": 60.5},
        7: [7],
    }
    for step, marker in markers.items():
        run.checkpoint_dir(step).mkdir()
        (run.checkpoint_dir(step) / CHECKPOINT_MARKER).write_text(json.dumps(marker))
    (run.checkpoints_dir / checkpoint_name(8)).mkdir()  # no marker yet: still being written
    with caplog.at_level("WARNING", logger="aviflow.store"):
        found = run.checkpoints()
    assert [(c.step, c.attempt, c.time) for c in found] == [(6, 2, 60.5)]
    skipped = [r.getMessage() for r in caplog.records]
    assert len(skipped) == 6 and all("wrong types" in m for m in skipped), skipped


def test_planted_control_files_do_not_break_the_job_listing(store: RunStore, secret: Path) -> None:
    run, other = make(store), make(store, "bob")
    os.unlink(other.meta_path)
    os.symlink(run.meta_path, other.meta_path)  # bob's job claims alice's meta
    with pytest.raises(JobNotFound, match=r"meta\.json"):
        other.meta()
    os.unlink(other.spec_path)
    os.symlink(secret, other.spec_path)
    assert store.locate(other.id) is None  # a symlinked job.yaml is no job
    assert store.ids() == [run.id]


def test_a_backend_reads_only_the_ranks_a_job_has(tmp_path: Path, resolver: str) -> None:
    backend = LocalBackend(root=tmp_path / "runs")
    run = make(backend.store, nodes=1, gpus=2)
    for rank in (0, 1, 2, 4000):
        run.rank_log(rank).write_text(f"rank {rank}\n")
    assert backend.ranks(run.id) == [0, 1]
    assert backend.log(run.id, 1, tail=5).text == "rank 1\n"
    for rank in (2, 4000, -1):
        with pytest.raises(RequestError, match=f"has no rank {rank}: it has ranks 0 to 1$"):
            backend.log(run.id, rank, tail=5)


def test_asking_for_stacks_never_writes_through_a_planted_link(
    store: RunStore, tmp_path: Path
) -> None:
    run = make(store)
    target = tmp_path / "written-by-the-controller"
    os.symlink(target, run.stack_request_path(1))  # dangling: a write through it would create it
    assert run.stacks_requested(1) is None
    run.request_stacks(1, 1234.5)
    assert not target.exists() and not run.stack_request_path(1).is_symlink()
    assert run.stacks_requested(1) == 1234.5
    # stacks/ itself a symlink: nothing is written, nothing raised (the job only hurts itself)
    (run.stacks_dir / "attempt-1.requested").unlink()
    run.stacks_dir.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, run.stacks_dir)
    run.request_stacks(2, 1.0)
    assert list(elsewhere.iterdir()) == [] and run.stacks_requested(2) is None


def test_failure_records_are_typed_and_bounded_before_they_reach_a_status(store: RunStore) -> None:
    run = make(store)
    records = {
        0: {"rank": 0, "attempt": 1, "exception": "ValueError", "message": "m" * 10_000,
            "traceback": "t" * 50_000 + "END", "time": 2.0},
        1: {"rank": "1", "attempt": 1, "exception": "ValueError", "time": 1.0},
        2: {"rank": 2, "attempt": 1, "exception": {"class": "x"}, "time": 1.0},
        3: {"rank": 3, "attempt": 1, "exception": "E" * 300, "time": 1.0},
        4: {"rank": 4, "attempt": True, "exception": "ValueError", "time": 1.0},
        5: {"rank": 5, "attempt": 1, "exception": "OSError", "time": "later"},
        6: {"rank": 6, "attempt": 1, "exit_code": -9, "log_tail": "Killed", "time": 1.0},
    }  # fmt: skip
    for rank, record in records.items():
        (run.failures_dir / f"attempt-1-rank-{rank}.json").write_text(json.dumps(record))
    found = run.failures(1)
    assert [(f.rank, f.exception, f.exit_code, f.log_tail) for f in found] == [
        (6, "", -9, "Killed"),
        (0, "ValueError", None, ""),
    ]
    first = found[1]
    assert (len(first.message), len(first.traceback)) == (4000, 32_000)
    assert first.message == "m" * 4000 and first.traceback.endswith("tEND")
