"""Rank logs held within a cap: rotation on a file (sizes, ``.1``, the marker), readers
across a rotation, the job's end, and what a hostile job can leave where its logs are (a
symlink, a FIFO, a directory): left alone, never followed, never failing the launcher.
Hostile cases run with ``openat2`` and with the per-component fallback."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from aviflow.errors import UnsafeJobFile
from aviflow.records import LogChunk
from aviflow.runtime._logcap import LogCap
from aviflow.runtime.env import RuntimeEnv
from aviflow.spec import TrainJob
from aviflow.store import MIN_RANK_LOG_CAP, Rotation, RunDir, RunStore, _files, rank_log_share

CAP = 100_000  # the rank's share: its log and .1 together
# 1000 lines of 100 bytes: "line 0000 xxx...x\n"
LINES = b"".join(b"line %04d " % i + b"x" * 89 + b"\n" for i in range(1000))
MARKER = (
    b"=== aviflow: log rotated: 87500 bytes came before the lines below; rank-0.log.1 keeps "
    b"the last 50000 of them, the other 37500 are gone (this log and rank-0.log.1 are capped "
    b"at 100000 bytes together) ===\n"
)


@pytest.fixture(params=["openat2", "per-component"])
def resolver(request: pytest.FixtureRequest) -> Iterator[str]:
    _files.use_openat2(request.param == "openat2")
    yield request.param
    _files.use_openat2(True)


@pytest.fixture
def run(tmp_path: Path) -> RunDir:
    job = TrainJob.from_dict({"metadata": {"name": "t"}, "spec": {"script": "1", "gpusPerNode": 2}})
    return RunStore(tmp_path / "runs").create(job, {}, "alice")


def test_a_log_past_half_its_cap_moves_to_dot1_and_is_cut_in_place(run: RunDir) -> None:
    live, old = run.rank_log(0), run.rank_log_previous(0)
    live.write_bytes(LINES[:50_000])  # half the cap: not yet
    assert run.cap_rank_log(0, CAP) is None and not old.exists()
    live.write_bytes(LINES)
    rank = os.open(live, os.O_WRONLY | os.O_APPEND)  # the rank's stdout, open throughout
    try:
        # the last eighth of the cap stays (12500 bytes, from a line's start), the half
        # before it goes to .1, and the marker says what is gone
        assert run.cap_rank_log(0, CAP) == Rotation(cut=87_500, kept=50_000, tail=12_500)
        assert old.read_bytes() == LINES[37_500:87_500]
        assert live.read_bytes() == MARKER + LINES[87_500:] and len(MARKER) == 203
        assert live.stat().st_size + old.stat().st_size == 62_703 <= CAP
        # the rank writes on at the new end (copytruncate), not at its old offset
        os.write(rank, b"after\n")
        assert live.read_bytes() == MARKER + LINES[87_500:] + b"after\n"
        # a second rotation counts what came before in the log, and replaces .1
        os.write(rank, LINES[:60_000])
        assert run.cap_rank_log(0, CAP) == Rotation(cut=203 + 60_006, kept=49_906, tail=12_500)
        assert old.read_bytes() == LINES[97_600:] + b"after\n" + LINES[:47_500]
        assert live.read_bytes() == (
            b"=== aviflow: log rotated: 147506 bytes came before the lines below; rank-0.log.1 "
            b"keeps the last 49906 of them, the other 97600 are gone (this log and rank-0.log.1 "
            b"are capped at 100000 bytes together) ===\n" + LINES[47_500:60_000]
        )
    finally:
        os.close(rank)


def test_readers_keep_their_place_across_a_rotation(run: RunDir) -> None:
    live = run.rank_log(0)
    live.write_bytes(LINES)
    before = run.log(0, offset=99_900)
    assert (before.offset, before.next, before.size) == (99_900, 100_000, 100_000)
    run.cap_rank_log(0, CAP)
    with open(live, "ab") as rank:
        rank.write(b"after\n")
    # a reader that had read everything reads on with what followed, no line twice
    on = run.log(0, offset=before.next)
    assert (on.offset, on.next, on.size, on.text) == (100_000, 100_006, 100_006, "after\n")
    # a cursor rotated away reads on from the file's start: the marker, then the last lines
    gap = run.log(0, offset=3_000)
    assert (gap.offset, gap.next) == (87_500 - 203, 100_006)
    assert gap.text == (MARKER + LINES[87_500:]).decode() + "after\n"
    # tails count the same way; a cursor past the end answers a `next` below it
    assert run.log(0, tail=1) == LogChunk(0, "after\n", 100_000, 100_006, 100_006)
    assert run.log(0, tail=0) == LogChunk(0, "", 100_006, 100_006, 100_006)
    past = run.log(0, offset=10**9)
    assert (past.offset, past.next, past.text) == (100_006, 100_006, "")
    # a marker the job forged moves only its own log's offsets: not past what JavaScript
    # counts exactly, nor before the file's start
    forged = b"=== aviflow: log rotated: %d bytes came before the lines below;\n"
    for number in (10**16 - 1, 3):
        live.write_bytes(forged % number + b"x\n")
        at = len(forged % number)  # the file's own offsets, as if it had no marker
        assert run.log(0, tail=1) == LogChunk(0, "x\n", at, at + 2, at + 2)


def test_at_the_jobs_end_the_log_and_its_dot1_fit_the_cap(run: RunDir) -> None:
    live, old = run.rank_log(0), run.rank_log_previous(0)
    live.write_bytes(LINES)
    assert run.cap_rank_log(0, CAP, final=True) == Rotation(87_500, 50_000, 12_500)
    assert live.read_bytes().endswith(b"line 0999 " + b"x" * 89 + b"\n")  # the last line
    assert (live.stat().st_size, old.stat().st_size) == (12_703, 50_000)
    # a .1 that a rotation left longer than half the cap (the rank wrote while it was
    # copied) is cut back to its last lines at the end, so both fit the cap at rest
    old.write_bytes(LINES[:80_000])
    live.write_bytes(b"short\n")
    assert run.cap_rank_log(0, CAP, final=True) is None
    assert old.read_bytes() == LINES[30_000:80_000] and live.read_bytes() == b"short\n"


def test_the_share_of_a_rank_and_its_place_in_the_runtime_env() -> None:
    assert rank_log_share(8 << 30, 16) == 512 << 20
    assert rank_log_share(1 << 20, 64) == MIN_RANK_LOG_CAP == 65_536  # never below 64 KiB
    assert rank_log_share(None, 4) is None
    env = RuntimeEnv(run_dir=Path("/runs/u/j"), rank_log_bytes=131_072)
    assert env.to_env()["AVIFLOW_RANK_LOG_BYTES"] == "131072"
    assert RuntimeEnv.from_env(env.to_env()) == env
    assert "AVIFLOW_RANK_LOG_BYTES" not in RuntimeEnv(run_dir=Path("/r")).to_env()


# -- what a hostile job leaves where its logs are ---------------------------------------------


def test_a_symlinked_special_or_hard_linked_log_is_left_alone(
    run: RunDir, resolver: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(LINES)
    os.symlink(outside, run.rank_log(0))
    with pytest.raises(UnsafeJobFile, match="symlink"):
        run.cap_rank_log(0, CAP)
    assert outside.read_bytes() == LINES and not run.rank_log_previous(0).exists()
    os.mkfifo(run.rank_log(1))  # nobody writes it: an open that waited would hang
    with pytest.raises(UnsafeJobFile, match="not a regular file"):
        _within(5, lambda: run.cap_rank_log(1, CAP, final=True))
    assert not run.rank_log_previous(1).exists()
    # a log hard-linked to another file: cutting it in place would cut that file too
    os.link(outside, run.rank_log(2))
    with pytest.raises(UnsafeJobFile, match="other hard links"):
        run.cap_rank_log(2, CAP)
    assert outside.read_bytes() == LINES and not run.rank_log_previous(2).exists()
    # a symlinked logs directory is not entered
    other = tmp_path / "other-logs"
    other.mkdir()
    (other / "rank-0.log").write_bytes(LINES)
    for name in os.listdir(run.logs_dir):
        os.unlink(run.logs_dir / name)
    run.logs_dir.rmdir()
    os.symlink(other, run.logs_dir)
    with pytest.raises(UnsafeJobFile):
        run.cap_rank_log(0, CAP, final=True)
    assert sorted(os.listdir(other)) == ["rank-0.log"]
    assert (other / "rank-0.log").read_bytes() == LINES


def test_a_dot1_the_job_planted_is_replaced_never_written_through(
    run: RunDir, resolver: str, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"not the job's\n")
    os.symlink(outside, run.rank_log_previous(0))
    run.rank_log(0).write_bytes(LINES)
    assert run.cap_rank_log(0, CAP) == Rotation(87_500, 50_000, 12_500)
    assert outside.read_bytes() == b"not the job's\n"
    assert not run.rank_log_previous(0).is_symlink()
    assert run.rank_log_previous(0).read_bytes() == LINES[37_500:87_500]
    # a directory where .1 goes: the rotation fails and cuts nothing
    run.rank_log_previous(1).mkdir()
    (run.rank_log_previous(1) / "x").write_text("x")
    run.rank_log(1).write_bytes(LINES)
    with pytest.raises(OSError):
        run.cap_rank_log(1, CAP)
    assert run.rank_log(1).read_bytes() == LINES
    assert [n for n in os.listdir(run.logs_dir) if n.endswith(".tmp")] == []


def test_the_launchers_log_cap_carries_on_past_what_it_cannot_cap(
    run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    os.mkfifo(run.rank_log(0))
    run.rank_log(1).write_bytes(LINES)
    leftover = run.logs_dir / ".rank-1.log.1.123.abcd.tmp"  # a rotation killed mid-copy
    leftover.write_bytes(LINES)
    cap = LogCap(run, [0, 1], CAP, every=0.05)
    cap.start()
    cap.check()
    cap.finish()
    assert not cap.is_alive() and not leftover.exists()
    assert run.rank_log(1).stat().st_size + run.rank_log_previous(1).stat().st_size <= CAP
    assert run.rank_log(1).read_bytes().endswith(LINES[-100:])
    told = capsys.readouterr().out.splitlines()
    assert len(told) == 1 and told[0].startswith("aviflow: rank 0's log is not capped: ")


def test_the_nodes_own_log_is_capped_at_a_ranks_share_too(
    run: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    run.node_log(1).write_bytes(LINES)  # accelerate's output: a traceback per restart, ...
    leftover = run.logs_dir / ".node-1.log.1.123.abcd.tmp"  # a rotation killed mid-copy
    leftover.write_bytes(LINES)
    cap = LogCap(run, [2, 3], CAP, every=0.05, node=1)
    cap.start()
    cap.finish()
    assert not leftover.exists()
    assert run.node_log(1).stat().st_size + run.node_log_previous(1).stat().st_size <= CAP
    assert run.node_log(1).read_bytes().startswith(b"=== aviflow: log rotated: 87500 bytes")
    assert run.node_log(1).read_bytes().endswith(LINES[-100:])
    assert run.node_log_previous(1).read_bytes() == LINES[37_500:87_500]
    # one it cannot cap is said once, and the ranks' logs are still capped
    run.node_log(1).unlink()
    os.mkfifo(run.node_log(1))
    run.rank_log(2).write_bytes(LINES)
    cap = LogCap(run, [2], CAP, every=0.05, node=1)
    cap.check()
    cap.check(final=True)
    assert run.rank_log(2).stat().st_size + run.rank_log_previous(2).stat().st_size <= CAP
    told = capsys.readouterr().out.splitlines()
    assert len(told) == 1 and told[0].startswith("aviflow: node 1's log is not capped: ")


def _within(seconds: float, fn):  # type: ignore[no-untyped-def]
    out: dict[str, object] = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:
            out["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for more than {seconds}s"
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")
