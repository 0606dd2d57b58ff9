"""The run store: unique ids, atomic writes, no escape from the root."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from aviflow.bundle import build_bundle
from aviflow.errors import JobNotFound
from aviflow.spec import TrainJob
from aviflow.status import RESTARTING, Event, JobState, usage_from_events
from aviflow.store import RunStore, atomic_write, read_lines

JOB = TrainJob.from_dict(
    {"metadata": {"name": "tiny"}, "spec": {"nodes": 2, "gpusPerNode": 2, "script": "print(1)"}}
)


def test_create_writes_a_complete_job_directory(tmp_path):
    store = RunStore(tmp_path)
    bundle = build_bundle(JOB, origin={"notebook": "a.ipynb"})
    run = store.create(JOB, bundle.store_files(), {"user": "ada"})
    assert run.id.startswith("tiny-") and len(run.id) == len("tiny-") + 8
    assert sorted(p.name for p in run.path.iterdir()) == [
        "checkpoints",
        "code",
        "failures",
        "heartbeats",
        "job.yaml",
        "logs",
        "meta.json",
    ]
    assert (run.code_dir / "train.py").read_text() == "print(1)"
    assert run.spec() == JOB
    manifest = (run.code_dir / "MANIFEST.json").read_text()
    assert bundle.content_hash in manifest
    assert run.meta()["user"] == "ada"
    assert store.ids() == [run.id]
    assert store.get(run.id).path == run.path
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".staging")]


def test_ids_are_unique_under_concurrency(tmp_path):
    store = RunStore(tmp_path)
    ids: list[str] = []

    def make():
        for _ in range(20):
            ids.append(store.create(JOB, {}, {}).id)

    threads = [threading.Thread(target=make) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 80
    assert sorted(store.ids()) == sorted(ids)


def test_ids_can_leave_known_jobs_out(tmp_path):
    store = RunStore(tmp_path)
    first, second = store.create(JOB, {}, {}).id, store.create(JOB, {}, {}).id
    assert store.ids() == [first, second]
    assert store.ids(exclude={first}) == [second]


def test_content_hash_depends_on_content_only():
    a = build_bundle(JOB)
    b = build_bundle(JOB.with_changes(nodes=1))
    c = build_bundle(JOB.with_changes(script="print(2)"))
    assert a.content_hash == b.content_hash != c.content_hash


def test_failed_create_leaves_nothing(tmp_path):
    store = RunStore(tmp_path)
    with pytest.raises(ValueError, match="outside the job directory"):
        store.create(JOB, {"../escape.txt": b"x"}, {})
    assert list(tmp_path.iterdir()) == []
    assert not (tmp_path.parent / "escape.txt").exists()


@pytest.mark.parametrize(
    "bad", ["../etc", "..", "a/b", "/etc/passwd", "UPPER", "", "x" * 64, "a\x00"]
)
def test_ids_cannot_escape_the_root(tmp_path, bad):
    with pytest.raises(JobNotFound):
        RunStore(tmp_path).get(bad)


def test_atomic_write_never_shows_a_torn_file(tmp_path):
    path = tmp_path / "status.json"
    atomic_write(path, "a" * 100000)
    stop = threading.Event()
    seen = set()

    def read():
        while not stop.is_set():
            seen.add(len(path.read_text()))

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(200):
        atomic_write(path, ("a" if i % 2 else "b") * 100000)
    stop.set()
    reader.join()
    assert seen == {100000}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_partial_lines_are_not_read(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2}\n{"ste')
    assert list(read_lines(path)) == [{"step": 1}, {"step": 2}]


def test_usage_sums_attempts_from_events():
    events = [
        Event(JobState.QUEUED, 0, time=100.0),
        Event(JobState.STARTING, 1, time=110.0),
        Event(JobState.RUNNING, 1, time=115.0),
        Event(RESTARTING, 1, time=140.0),
        Event(JobState.STARTING, 2, time=141.0),
        Event(JobState.SUCCEEDED, 2, time=171.0),
    ]
    usage = usage_from_events(events, gpus=4)
    assert usage.running_seconds == 60.0
    assert usage.gpu_seconds == 240.0
    assert usage.attempts == 2
    running = usage_from_events(events[:3], gpus=4, now=120.0)
    assert running.gpu_seconds == 40.0


def test_store_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AVIFLOW_ROOT", str(tmp_path / "r"))
    assert RunStore().root == tmp_path / "r"
    monkeypatch.delenv("AVIFLOW_ROOT")
    assert RunStore().root == Path(os.path.expanduser("~")) / ".aviflow" / "runs"
