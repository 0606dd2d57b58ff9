"""What a panel refresh and a job listing cost as history grows, as ratios measured in one run.

1. **Panel refresh**: what the panel's poller does each tick once it is running (read the
   job through :class:`~aviflow.views.snapshot.SnapshotReader`, render header, ranks,
   charts, log tail and checkpoints), after one new metric row, for a job with 10 and with
   10,000 logged rows. Target: ratio (10,000 / 10) <= 1.5: a refresh costs what changed,
   not the job's history. The baseline is a refresh that re-reads everything (a new reader
   per tick, as the panel did before), at the same two sizes.
2. **Job listing** (``%aviflow_jobs --limit 10``): one summaries read of the local backend
   with 10 and 1,000 jobs, and with 10 and 10,000 metric rows per job (a listing never
   reads metrics: that ratio should be ~1).

Jobs are written into a temporary run store the way the supervisor and the runtime write
them; no process is started.

    .venv/bin/python bench/panel.py [--repeat 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.job import Job
from aviflow.records import Event, EventType, JobState, JobStatus, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import CHECKPOINT_MARKER, append_line, atomic_write
from aviflow.views.sections import (
    charts_html,
    checkpoints_html,
    header_html,
    log_html,
    ranks_html,
)
from aviflow.views.snapshot import JobSnapshot, SnapshotReader
from aviflow_magics._table import jobs_table

TARGET = 1.5
SPEC = TrainJob.from_dict(
    {"metadata": {"name": "bench"}, "spec": {"nodes": 2, "gpusPerNode": 2, "script": "pass\n"}}
)


def make_job(backend: LocalBackend, rows: int, state: JobState = JobState.RUNNING) -> Job:
    """A job with ``rows`` metric rows, 4 rank logs of 2,000 lines and 2 checkpoints."""
    run = backend.store.create(SPEC, build_bundle(SPEC).store_files(), "bench")
    t0 = time.time() - 3600
    events = [Event(EventType.QUEUED, 0, "queued", t0), Event(EventType.STARTING, 1, "", t0 + 1)]
    events.append(Event(EventType.RUNNING, 1, "running", t0 + 2))
    if state.is_finished():
        events.append(Event(EventType(state.value), 1, "done", t0 + 3000))
    run.record(events, JobStatus(state, 1, events[-1].message, events[-1].time))
    with open(run.metrics_path, "w") as f:
        for step in range(1, rows + 1):
            row = MetricRow(step, t0 + step * 0.01, 1, {"loss": 1.0 / step, "lr": 1e-3})
            f.write(json.dumps(row.to_dict(), separators=(",", ":")) + "\n")
    for rank in range(4):
        run.rank_log(rank).write_text("".join(f"rank {rank} step {i}\n" for i in range(2000)))
    for step in (rows // 2, rows):
        run.checkpoint_dir(step).mkdir(parents=True, exist_ok=True)
        atomic_write(run.checkpoint_dir(step) / CHECKPOINT_MARKER, json.dumps({"step": step}))
    return Job(run.id, backend)


def render(job: Job, snap: JobSnapshot, rank: int = 0, tail: int = 40) -> int:
    """What the panel's widgets render from one snapshot (the log viewer reads its tail)."""
    parts = [
        header_html(snap),
        ranks_html(snap),
        charts_html(snap.metrics),
        checkpoints_html(snap),
        log_html(job.logs(rank=rank, tail=tail)),
    ]
    return sum(len(p) for p in parts)


def incremental_refresh(job: Job) -> Callable[[], None]:
    reader = SnapshotReader(job)
    reader.read()  # the panel's first tick
    run = job.backend.run_dir(job.id)  # type: ignore[attr-defined]
    step = [reader.metric_rows]

    def tick() -> None:
        step[0] += 1
        append_line(run.metrics_path, MetricRow(step[0], time.time(), 1, {"loss": 0.1}).to_dict())
        render(job, reader.read())

    return tick


def full_refresh(job: Job) -> Callable[[], None]:
    def tick() -> None:
        render(job, SnapshotReader(job).read())

    return tick


def listing(backend: LocalBackend) -> Callable[[], None]:
    def tick() -> None:
        table = jobs_table(LocalBackend(root=backend.store.root), limit=10)
        table._repr_html_()

    return tick


def measure(pairs: dict[str, tuple[Callable[[], None], Callable[[], None]]], repeat: int) -> dict:
    """Median seconds of each (small, large) pair, alternated call by call."""
    samples: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in pairs}
    for _ in range(repeat):
        for name, (small, large) in pairs.items():
            for fn, out in ((small, samples[name][0]), (large, samples[name][1])):
                t = time.perf_counter()
                fn()
                out.append(time.perf_counter() - t)
    return {k: (statistics.median(a), statistics.median(b)) for k, (a, b) in samples.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    ns = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="aviflow-bench-panel-") as tmp:
        root = Path(tmp)
        small_job = make_job(LocalBackend(root=root / "a"), 10)
        large_job = make_job(LocalBackend(root=root / "b"), 10_000)
        few, many = LocalBackend(root=root / "few"), LocalBackend(root=root / "many")
        for _ in range(10):
            make_job(few, 10, JobState.SUCCEEDED)
        for _ in range(1000):
            make_job(many, 10, JobState.SUCCEEDED)
        thin, thick = LocalBackend(root=root / "thin"), LocalBackend(root=root / "thick")
        for _ in range(10):
            make_job(thin, 10, JobState.SUCCEEDED)
            make_job(thick, 10_000, JobState.SUCCEEDED)
        results = measure(
            {
                "panel refresh (incremental), 10 vs 10,000 rows": (
                    incremental_refresh(small_job),
                    incremental_refresh(large_job),
                ),
                "panel refresh re-reading everything (baseline)": (
                    full_refresh(small_job),
                    full_refresh(large_job),
                ),
                "jobs listing, 10 vs 1,000 jobs": (listing(few), listing(many)),
                "jobs listing, 10 vs 10,000 rows per job": (listing(thin), listing(thick)),
            },
            ns.repeat,
        )
    width = max(len(k) for k in results)
    print(f"{'':{width}}  {'small':>9}  {'large':>9}  ratio")
    ok = True
    for name, (small, large) in results.items():
        ratio = large / small
        note = ""
        if name.startswith("panel refresh (incremental)"):
            ok = ratio <= TARGET
            note = f"  (target <= {TARGET}: {'met' if ok else 'NOT met'})"
        print(f"{name:{width}}  {small * 1e3:7.2f}ms  {large * 1e3:7.2f}ms  {ratio:5.2f}{note}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
