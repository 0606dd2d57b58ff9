"""What a hostile job's files cost the platform's readers, as ratios measured in one run.

A job may write whatever it likes into its ``data/``: a 2 GB rank log, a million-row
``metrics.jsonl``, a 64 MB single line. Every request that reads it (aviflow-api's log tail,
the job view's first snapshot, a metrics page from cursor 0) must cost what it returns, not
what the job wrote, so it does not slow other users' requests sharing aviflow-api's workers.

Each read is timed on a normal job (20 rank-log lines, 100 metric rows) and on two hostile
ones whose metrics file differs ten times in size, all in one temporary run store:

1. a rank log's last 200 lines (the job page, the sidebar's first log view);
2. the first metrics read from cursor 0, and reading to the end by cursor (bounded reads:
   the first costs at most 8 MiB; the whole file is read once, in 8 MiB reads);
3. the first job view snapshot (``SnapshotReader``: status, metrics, ranks, checkpoints);
4. what the controller reads of the job on each reconcile (heartbeats, rank beats, stacks:
   2 GB each in the hostile jobs; the metrics file's time).

Target: the hostile job ten times larger costs what the smaller one does (ratio <= 1.5):
every read is bounded (a log by its tail, metrics by 8 MiB a read), whatever the job wrote.
The 2 GB logs are sparse files (no disk used); the metrics files are real (about 70 and
145 MB).

    .venv/bin/python bench/hostile_reads.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.records import Event, EventType, JobState, JobStatus
from aviflow.spec import TrainJob
from aviflow.store import MAX_LINES_READ, RunDir
from aviflow.views.snapshot import SnapshotReaders

TARGET = 1.5
SPEC = TrainJob.from_dict(
    {"metadata": {"name": "bench"}, "spec": {"nodes": 1, "gpusPerNode": 2, "script": "pass\n"}}
)


def make_job(backend: LocalBackend) -> RunDir:
    run = backend.store.create(SPEC, build_bundle(SPEC).store_files(), "bench")
    t0 = time.time() - 600
    events = [Event(EventType.QUEUED, 0, "queued", t0), Event(EventType.RUNNING, 1, "", t0 + 1)]
    run.record(events, JobStatus(JobState.RUNNING, 1, "running", t0 + 1))
    return run


def metric_line(step: int) -> bytes:
    row = {"step": step, "time": 1.0 + step, "attempt": 1, "values": {"loss": 1.0 / (step + 1)}}
    return (json.dumps(row, separators=(",", ":")) + "\n").encode()


def normal(run: RunDir) -> None:
    run.rank_log(0).write_text("".join(f"line {i}\n" for i in range(20)))
    run.metrics_path.write_bytes(b"".join(metric_line(s) for s in range(100)))


def hostile(run: RunDir, rows: int) -> None:
    with open(run.rank_log(0), "wb") as f:  # 2 GB, sparse, ending in lines
        f.truncate(2 << 30)
        f.seek(0, os.SEEK_END)
        f.write(b"".join(f"line {i}\n".encode() for i in range(1000)))
    # what the controller reads on each reconcile: heartbeats and stacks of 2 GB (sparse)
    for path in (run.heartbeat_path(0), run.rank_heartbeat_path(1, 0), run.stack_path(1, 0)):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as f:
            f.truncate(2 << 30)
    with open(run.metrics_path, "wb") as f:
        f.write(b"x" * (64 << 20) + b"\n")  # one 64 MB line first
        batch = 10_000
        for start in range(0, rows, batch):
            f.write(b"".join(metric_line(s) for s in range(start, min(rows, start + batch))))


def controller_reads(run: RunDir) -> object:
    """What the controller reads of a job's data on one reconcile (its node heartbeats, the
    hang watch's rank beats, metrics file time and stacks; failure tails come from the API
    server's pod logs, bounded by tailLines). A hostile job's files must not make the
    reconcile of its own job, or the shared workers' next job, slower."""
    return (
        run.heartbeat(0),
        run.rank_beats(1, 2),
        run.metrics_path.stat().st_mtime,
        run.stacks(1, 2),
        run.hang(1),
    )


def timed(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def read_to_end(run: RunDir) -> int:
    cursor, rows = 0, 0
    size = run.metrics_path.stat().st_size
    while cursor < size:
        batch = run.metrics(cursor)
        rows, cursor = rows + len(batch.items), batch.next
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        backend = LocalBackend(root=Path(tmp) / "runs")
        good, small, big = make_job(backend), make_job(backend), make_job(backend)
        normal(good)
        hostile(small, args.rows // 10)
        hostile(big, args.rows)
        mb = big.metrics_path.stat().st_size >> 20
        print(
            f"hostile jobs: a 2 GB rank log (sparse); metrics.jsonl of a 64 MB line, then "
            f"{args.rows // 10} rows ({small.metrics_path.stat().st_size >> 20} MB) or "
            f"{args.rows} rows ({mb} MB)"
        )
        reads: dict[str, Callable[[RunDir], object]] = {
            "log tail 200 lines": lambda run: backend.log(run.id, 0, tail=200),
            "first metrics read": lambda run: run.metrics(0),
            "first job view": lambda run: SnapshotReaders().read(backend, run.id),
            "controller's reads": controller_reads,
        }
        print(
            f"{'read':<20} {'normal':>9} {'hostile':>9} {'hostile x10':>12} {'x10 / hostile':>14}"
        )
        ok = True
        for name, read in reads.items():
            base, cost, cost10 = (
                timed(lambda r=run, f=read: f(r), args.repeat) for run in (good, small, big)
            )
            ratio = cost10 / cost
            ok = ok and ratio <= TARGET
            print(
                f"{name:<20} {base * 1e3:>7.2f}ms {cost * 1e3:>7.2f}ms {cost10 * 1e3:>10.2f}ms "
                f"{ratio:>14.2f}"
            )
        first = big.metrics(0)
        t0 = time.perf_counter()
        total = read_to_end(big)
        whole = time.perf_counter() - t0
        print(
            f"the first metrics read returns cursor {first.next} (at most {MAX_LINES_READ} + 1 "
            f"bytes: the 64 MB line is skipped); all {total} rows by cursor: {whole:.2f}s"
        )
        print(
            f"target: each read costs the same whatever the job wrote (x10 / hostile <= {TARGET}): "
            + ("met" if ok else "NOT met")
        )
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
