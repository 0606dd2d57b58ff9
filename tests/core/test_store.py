"""The run store: its layout, unique ids, atomic writes, incremental reads, no escape."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from aviflow.bundle import build_bundle
from aviflow.errors import JobNotFound
from aviflow.paging import Batch, read_pages, wire_bytes
from aviflow.records import CheckpointRef, Event, EventType, JobMeta, JobState, JobStatus
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore, atomic_write, read_lines

JOB = TrainJob.from_dict(
    {"metadata": {"name": "tiny"}, "spec": {"nodes": 2, "gpusPerNode": 2, "script": "print(1)"}}
)


def make(store: RunStore, user: str = "ada", **kw: object) -> RunDir:
    return store.create(JOB, build_bundle(JOB).store_files(), user, **kw)  # type: ignore[arg-type]


def test_create_writes_a_complete_job_directory_under_its_user(tmp_path):
    store = RunStore(tmp_path)
    bundle = build_bundle(JOB, origin={"notebook": "a.ipynb"})
    run = store.create(
        JOB, bundle.store_files(), "ada", team="vision", backend="local", code_hash="sha256:x"
    )
    assert run.id.startswith("tiny-") and len(run.id) == len("tiny-") + 8
    assert run.path == tmp_path / "ada" / run.id
    # the control part at the top, the code snapshot (with the runtime's copy of the spec),
    # and the part the job writes, alone in data/ (its pods' only writable mount)
    assert sorted(p.name for p in run.path.iterdir()) == ["code", "data", "job.yaml", "meta.json"]
    assert sorted(p.name for p in run.data_dir.iterdir()) == [
        "checkpoints",
        "failures",
        "heartbeats",
        "logs",
        "stacks",
    ]
    assert sorted(p.name for p in run.code_dir.iterdir()) == [
        ".aviflow-job.yaml",
        "MANIFEST.json",
        "train.py",
    ]
    assert run.runtime_spec() == JOB == run.spec()
    assert (run.code_dir / "train.py").read_text() == "print(1)"
    assert run.spec() == JOB
    assert bundle.content_hash in run.manifest_path.read_text()
    meta = run.meta()
    assert (meta.id, meta.name, meta.user, meta.team, meta.backend, meta.code_hash) == (
        run.id,
        "tiny",
        "ada",
        "vision",
        "local",
        "sha256:x",
    )
    assert os.readlink(tmp_path / ".ids" / run.id) == f"../ada/{run.id}"
    assert store.ids() == [run.id]
    assert store.get(run.id).path == run.path
    assert not [p for p in (tmp_path / "ada").iterdir() if p.name.startswith(".staging")]


def test_user_directories_are_dns_labels_that_only_their_user_maps_to(tmp_path):
    store = RunStore(tmp_path)
    a, b = make(store, "Alice@Example.com"), make(store, "alice@example.com")
    assert a.path.parent != b.path.parent
    for run in (a, b):
        assert run.path.parent.name.startswith("alice-example-com---")
        assert run.meta().user in ("Alice@Example.com", "alice@example.com")
    assert store.ids() == [a.id, b.id]


def test_one_users_directory_mounted_alone_still_finds_its_jobs(tmp_path):
    """A notebook or trainer pod mounts only ``<root>/<user>`` (no ``.ids`` index)."""
    store = RunStore(tmp_path / "full")
    run = make(store)
    (run.checkpoint_dir(20)).mkdir(parents=True)
    (run.checkpoint_dir(20) / "aviflow-checkpoint.json").write_text('{"step": 20}')
    mount = tmp_path / "mount"
    mount.mkdir()
    (mount / "ada").symlink_to(store.user_dir("ada"))
    alone = RunStore(mount)
    assert alone.get(run.id).path == mount / "ada" / run.id
    assert alone.checkpoint_path(CheckpointRef(run.id, 20)) == mount / "ada" / run.id / (
        "data/checkpoints/step-000000020"
    )
    with pytest.raises(JobNotFound, match="no complete checkpoint at step 30"):
        alone.checkpoint_path(CheckpointRef(run.id, 30))


def test_ids_are_unique_under_concurrency(tmp_path):
    store = RunStore(tmp_path)
    ids: list[str] = []

    def create(user: str) -> None:
        for _ in range(20):
            ids.append(store.create(JOB, {}, user).id)

    threads = [threading.Thread(target=create, args=(u,)) for u in ("a", "b", "a", "c")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(ids)) == 80
    assert sorted(store.ids()) == sorted(ids)


def test_content_hash_depends_on_content_only():
    a = build_bundle(JOB)
    b = build_bundle(JOB.with_changes(nodes=1))
    c = build_bundle(JOB.with_changes(script="print(2)"))
    assert a.content_hash == b.content_hash != c.content_hash


def test_failed_create_leaves_nothing(tmp_path):
    store = RunStore(tmp_path)
    with pytest.raises(ValueError, match="outside the job directory"):
        store.create(JOB, {"../escape.txt": b"x"}, "ada")
    assert [p.name for p in (tmp_path / "ada").iterdir()] == []
    assert store.ids() == []
    assert not (tmp_path / "escape.txt").exists()


@pytest.mark.parametrize(
    "bad", ["../etc", "..", "a/b", "/etc/passwd", "UPPER", "", "x" * 64, "a\x00", 3]
)
def test_ids_cannot_escape_the_root(tmp_path, bad):
    with pytest.raises(JobNotFound):
        RunStore(tmp_path).get(bad)


def test_a_removed_job_is_gone_from_the_listing(tmp_path):
    import shutil

    store = RunStore(tmp_path)
    keep, gone = make(store), make(store)
    shutil.rmtree(gone.path)
    assert store.ids() == [keep.id]
    assert store.ids(newest=1) == [keep.id]
    with pytest.raises(JobNotFound):
        RunStore(tmp_path).get(gone.id)


def test_the_newest_ids_are_read_from_the_end_of_the_index(tmp_path):
    import shutil

    store = RunStore(tmp_path)
    runs = [make(store, user=f"u{i % 3}") for i in range(40)]
    ids = [r.id for r in runs]
    assert store.ids() == ids
    assert store.ids(newest=5) == ids[-5:] and store.ids(newest=0) == []
    assert store.ids(newest=100) == ids
    for run in runs[-30:]:  # the newest 30 were removed by hand
        shutil.rmtree(run.path)
    assert store.ids(newest=5) == ids[5:10]
    # a store whose index is gone (one user's directory mounted alone) is scanned
    store.index_log.unlink()
    assert RunStore(tmp_path).ids() == ids[:10]


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


def test_lines_are_read_from_a_cursor_and_partial_or_broken_lines_are_left(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1}\n[1, 2]\nnot json\n{"step": 2}\n{"ste')
    first = read_lines(path)
    assert first.items == [{"step": 1}, {"step": 2}] and first.more is False
    end = len(b'{"step": 1}\n[1, 2]\nnot json\n{"step": 2}\n')
    assert first.next == end
    with open(path, "ab") as f:
        f.write(b'p": 3}\n')
    size = path.stat().st_size
    assert read_lines(path, end) == Batch([{"step": 3}], size, False)
    assert read_lines(path, size) == Batch([], size, False)
    assert read_lines(tmp_path / "missing.jsonl", 7) == Batch([], 7, False)
    assert read_lines(path, 2**53) == Batch([], size, False)  # a cursor past the end is the end


def metric_lines(steps: range, pad: int = 0) -> list[bytes]:
    """metrics.jsonl lines as a job's tracker writes them (compact JSON, one per step)."""
    return [
        json.dumps(
            {"step": s, "time": float(s), "attempt": 1, "values": {"loss": 1.0, "pad": "x" * pad}},
            separators=(",", ":"),
        ).encode()
        + b"\n"
        for s in steps
    ]


def test_a_page_holds_at_most_its_rows_and_says_more_follow(tmp_path):
    run = make(RunStore(tmp_path))
    lines = metric_lines(range(1, 2501))
    run.metrics_path.write_bytes(b"".join(lines))
    ends = [sum(map(len, lines[: n + 1])) for n in range(len(lines))]  # offset after each line
    first = run.metrics(rows=1000)
    assert [m.step for m in first.items] == list(range(1, 1001))
    assert (first.next, first.more) == (ends[999], True)
    pages, cursor, more = [], 0, True
    while more:
        page = run.metrics(cursor, rows=1000)
        pages.append((len(page.items), page.next, page.more))
        cursor, more = page.next, page.more
    assert pages == [(1000, ends[999], True), (1000, ends[1999], True), (500, ends[2499], False)]
    # the filter is applied before the page is counted: no empty pages before step 2001
    late = run.metrics(after_step=2000, rows=1000)
    assert [m.step for m in late.items] == list(range(2001, 2501))
    assert (late.next, late.more) == (ends[2499], False)
    # read_pages follows them: all, or a bounded number of pages
    assert read_pages(lambda at: run.metrics(at, rows=1000)) == Batch(
        run.metrics().items, ends[2499], False
    )
    two = read_pages(lambda at: run.metrics(at, rows=1000), pages=2)
    assert (len(two.items), two.next, two.more) == (2000, ends[1999], True)


def test_a_page_holds_at_most_its_budget_of_bytes_as_json(tmp_path):
    run = make(RunStore(tmp_path))
    lines = metric_lines(range(1, 101), pad=1000)
    run.metrics_path.write_bytes(b"".join(lines))
    weight = wire_bytes(run.metrics(rows=1).items[0])
    assert weight == 1076  # the record as aviflow-api writes it, and ", "
    page = run.metrics(budget=10_000)
    assert len(page.items) == 9 and 9 * weight <= 10_000 < 10 * weight
    assert (page.next, page.more) == (sum(map(len, lines[:9])), True)
    steps, cursor, more = [], 0, True
    while more:
        page = run.metrics(cursor, budget=10_000)
        assert sum(map(wire_bytes, page.items)) <= 10_000
        steps += [m.step for m in page.items]
        cursor, more = page.next, page.more
    assert steps == list(range(1, 101)) and cursor == sum(map(len, lines))


def test_lines_that_are_not_records_are_skipped_but_never_counted(tmp_path):
    run = make(RunStore(tmp_path))
    good = metric_lines(range(1, 4))
    heavy = metric_lines(range(10, 11), pad=1000)[0]  # heavier than any page of 1000 bytes
    junk = [b"[1, 2]\n", b"not json\n", b'{"step": "7"}\n', b"\n", b"{" * 100_000 + b"\n"]
    data = good[0] + b"".join(junk) + good[1] + heavy + good[2] + b'{"step": 4, "ti'
    run.metrics_path.write_bytes(data)
    page = run.metrics(rows=1)
    assert ([m.step for m in page.items], page.more) == ([1], True)
    assert page.next == len(good[0]) + sum(map(len, junk))  # before the record that follows
    page = run.metrics(page.next, rows=1)
    assert ([m.step for m in page.items], page.more) == ([2], True)
    assert page.next == len(good[0]) + sum(map(len, junk)) + len(good[1])
    page = run.metrics(page.next, rows=1, budget=1000)
    assert ([m.step for m in page.items], page.more) == ([3], False)  # the heavy one skipped
    assert page.next == len(data) - len(b'{"step": 4, "ti')  # the line being written waits


def test_events_and_status_round_trip_and_read_incrementally(tmp_path):
    run = make(RunStore(tmp_path))
    first = [Event(EventType.QUEUED, 0, "waiting", 1.0), Event(EventType.STARTING, 1, "", 2.0)]
    run.record(first, JobStatus(JobState.STARTING, 1, "starting", 2.0))
    batch = run.events()
    assert batch.items == first
    run.record([Event(EventType.RUNNING, 1, "running", 3.0)], JobStatus(JobState.RUNNING, 1))
    more = run.events(since=batch.next)
    assert [e.type for e in more.items] == [EventType.RUNNING]
    assert run.events(since=more.next).items == []
    assert run.status() == JobStatus(JobState.RUNNING, 1)
    assert json.loads(run.status_path.read_text()) == {"state": "RUNNING", "attempt": 1}


def test_a_job_without_readable_meta_is_reported_not_guessed(tmp_path):
    run = make(RunStore(tmp_path))
    run.meta_path.write_text("{not json")
    with pytest.raises(JobNotFound, match=r"no readable meta\.json"):
        run.meta()
    assert isinstance(make(RunStore(tmp_path)).meta(), JobMeta)


def _log(tmp_path: Path, text: bytes) -> RunDir:
    run = RunDir(tmp_path / "u" / "job-1")
    run.logs_dir.mkdir(parents=True)
    run.rank_log(0).write_bytes(text)
    return run


def test_log_tail_reads_the_last_lines_only(tmp_path):
    lines = b"".join(b"line %d\n" % i for i in range(100000))
    run = _log(tmp_path, lines)
    chunk = run.log(0, tail=3)
    assert chunk.text == "line 99997\nline 99998\nline 99999\n"
    assert (chunk.offset, chunk.next, chunk.size) == (len(lines) - 33, len(lines), len(lines))
    assert run.log(0, tail=0).text == ""
    big = run.log(0, tail=100000)  # more than one read returns: cut at a line start
    assert len(big.text.encode()) <= 1 << 20 and big.text.startswith("line ")
    assert big.offset == len(lines) - len(big.text.encode()) and big.next == len(lines)
    no_newline = _log(tmp_path / "b", b"a\nb\nc").log(0, tail=2)
    assert no_newline.text == "b\nc"


def test_log_from_an_offset_never_splits_a_character(tmp_path):
    text = "héllo wörld\n".encode()
    run = _log(tmp_path, text)
    first = run.log(0, offset=0, limit=2)  # "h" and half of "é"
    assert (first.text, first.next) == ("h", 1)
    rest = run.log(0, offset=first.next)
    assert rest.text == "éllo wörld\n" and rest.next == len(text)
    assert run.log(0, offset=rest.next).text == ""
    assert run.log(0, offset=10**9).text == ""
    assert run.log(7).text == "" and run.log(7).size == 0


def test_log_reads_are_bounded(tmp_path):
    run = _log(tmp_path, b"x" * 5_000_000)
    whole = run.log(0)
    assert len(whole.text) == 1 << 20 and whole.next == 5_000_000
    with pytest.raises(ValueError, match="tail or offset"):
        run.log(0, tail=1, offset=0)
    with pytest.raises(ValueError, match="tail must be between"):
        run.log(0, tail=10**9)


def test_store_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AVIFLOW_ROOT", str(tmp_path / "r"))
    assert RunStore().root == tmp_path / "r"
    monkeypatch.delenv("AVIFLOW_ROOT")
    assert RunStore().root == Path(os.path.expanduser("~")) / ".aviflow" / "runs"


def test_finished_jobs_of_the_flat_layout_of_earlier_versions_are_moved_in(tmp_path):
    """Runs written before the per-user layout (``<root>/<job-id>/``) keep being listed."""
    import json as _json

    def legacy(job_id: str, user: str, submitted: float, state: str) -> Path:
        d = tmp_path / job_id
        (d / "checkpoints" / "step-000000010").mkdir(parents=True)
        (d / "checkpoints" / "step-000000010" / "aviflow-checkpoint.json").write_text(
            '{"step": 10}'
        )
        (d / "job.yaml").write_text(JOB.to_yaml())
        meta = {"id": job_id, "name": "tiny", "user": user, "submitted": submitted,
                "code_hash": "sha256:old", "origin": {}}  # fmt: skip
        (d / "meta.json").write_text(_json.dumps(meta))
        failure = {"node": 1, "exit_code": -9, "log_tail": "Killed"}
        (d / "status.json").write_text(_json.dumps({"state": state, "failure": failure}))
        return d

    legacy("old-2", "bob", 20.0, "FAILED")
    legacy("old-1", "ada", 10.0, "SUCCEEDED")
    running = legacy("old-3", "ada", 30.0, "RUNNING")
    store = RunStore(tmp_path)
    assert store.migrate_legacy() == ["old-1", "old-2"]  # the explicit step
    new = make(store)
    assert store.ids() == ["old-1", "old-2", new.id]
    moved = store.get("old-2")
    assert moved.path == tmp_path / "bob" / "old-2"
    assert moved.meta().code_hash == "sha256:old"
    failure = moved.status().failure
    assert failure is not None and (failure.exit_code, failure.log_tail) == (-9, "Killed")
    assert store.checkpoint_path(CheckpointRef("old-1", 10)).is_dir()
    assert running.is_dir()  # an unfinished one stays where its supervisor works
    assert RunStore(tmp_path).migrate_legacy() == []


def test_a_torn_line_stays_alone_and_a_short_write_is_taken_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line cut short (a crash, a full disk) no longer swallows the next one; a write the
    disk takes only in part leaves the file as it was and says so."""
    from aviflow.store._files import append_line

    path = tmp_path / "events.jsonl"
    append_line(path, {"n": 1})
    with path.open("ab") as f:
        f.write(b'{"n": 2, "cut sh')  # the writer died here
    append_line(path, {"n": 3})
    assert path.read_bytes() == b'{"n":1}\n{"n": 2, "cut sh\n{"n":3}\n'
    assert read_lines(path) == Batch([{"n": 1}, {"n": 3}], len(path.read_bytes()))

    before = path.read_bytes()
    real_write = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: real_write(fd, data[:4]))
    with pytest.raises(OSError, match=r"the disk took 4 of 8 bytes; nothing appended") as exc:
        append_line(path, {"n": 4})
    monkeypatch.undo()
    assert exc.value.errno == 28  # ENOSPC
    assert path.read_bytes() == before
    append_line(path, {"n": 5})
    assert read_lines(path).items == [{"n": 1}, {"n": 3}, {"n": 5}]


def test_the_cancel_reason_is_read_bounded_and_never_through_a_link(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "job")
    run.path.mkdir()
    assert run.cancel_reason() is None
    atomic_write(run.cancel_request, b"cancelled by alice\n")
    assert run.cancel_reason() == "cancelled by alice"
    secret = tmp_path / "secret"
    secret.write_text("the platform's token")
    run.cancel_request.unlink()
    run.cancel_request.symlink_to(secret)
    assert run.cancel_reason() == "cancelled"  # asked, but whose words it cannot tell
    run.cancel_request.unlink()
    run.cancel_request.write_bytes(b"x" * 5000)
    assert run.cancel_reason() == "cancelled"


def test_a_submission_is_pending_until_its_driver_settles_it(tmp_path):
    store = RunStore(tmp_path)
    plain = make(store)
    run = make(store, submission="tok-1", job_id="tiny-0000abcd")
    assert (run.id, run.submission_token(), plain.submission_token()) == (
        "tiny-0000abcd",
        "tok-1",
        None,
    )
    assert "submission.json" in {p.name for p in run.path.iterdir()}  # control part, not data/
    assert [job_id for job_id, _ in store.pending()] == [run.id]
    store.settle(run.id)
    assert store.pending() == []
    again = make(store, submission="tok-2")
    store.remove(again.id)  # a submission taken back is not pending either
    assert store.pending() == [] and store.ids() == [plain.id, run.id]


def test_an_id_reserved_by_a_writer_that_died_is_taken_again_once_stale(tmp_path):
    store = RunStore(tmp_path)
    make(store)  # the index exists
    link = store.index_dir / "tiny-0000dead"
    os.symlink("../ada/tiny-0000dead", link)  # reserved; its directory never renamed in
    with pytest.raises(FileExistsError, match="'tiny-0000dead' is taken"):
        make(store, job_id="tiny-0000dead")  # a writer may still be at it
    old = os.lstat(link).st_mtime - 120
    os.utime(link, (old, old), follow_symlinks=False)
    assert make(store, job_id="tiny-0000dead").id == "tiny-0000dead"


def test_a_staging_directory_left_by_a_killed_writer_is_swept_once_stale(tmp_path):
    store = RunStore(tmp_path)
    make(store)
    child = os.fork()
    if child == 0:  # a writer killed (-9) halfway through a create: staging written, no id
        store._reserve_id = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)  # type: ignore[method-assign]
        make(store)
        os._exit(3)
    _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    left = [p for p in (tmp_path / "ada").iterdir() if p.name.startswith(".staging-")]
    marks = list(store.staging_dir.iterdir())
    assert len(left) == 1 and [m.name for m in marks] == [left[0].name.removeprefix(".staging-")]
    assert (left[0] / "job.yaml").is_file()
    # a hostile or broken mark never steers the sweep: a name this store never writes, a
    # home outside the root, a staging "directory" that is a link
    elsewhere = tmp_path.parent / f"{tmp_path.name}-elsewhere"
    (elsewhere / ".staging-00000000000000aa").mkdir(parents=True)
    (store.staging_dir / "00000000000000aa").write_text(f"../{elsewhere.name}")
    (store.staging_dir / "not-a-token").write_text("ada")
    (tmp_path / "ada" / ".staging-00000000000000bb").symlink_to(elsewhere)
    (store.staging_dir / "00000000000000bb").write_text("ada")
    make(store)  # another create: the marks are young, a writer may still be at it
    assert left[0].is_dir()
    old = time.time() - 3601
    for mark in store.staging_dir.iterdir():
        os.utime(mark, (old, old))
    make(store)
    assert not left[0].exists()
    assert (elsewhere / ".staging-00000000000000aa").is_dir()  # outside the root: untouched
    assert elsewhere.is_dir() and (tmp_path / "ada" / ".staging-00000000000000bb").is_symlink()
    assert sorted(m.name for m in store.staging_dir.iterdir()) == ["not-a-token"]
    assert len(store.ids()) == 3
