"""A point-in-time view of a job, read through the backend's incremental reads.

The panel's widgets render snapshots; they never read the job themselves, so the same
snapshot feeds a live panel, a re-attached one (replayed from the run store) and tests.
A :class:`SnapshotReader` keeps cursors into the job's events and metrics, so each refresh
reads what changed since the last one, at most :data:`PAGES_PER_READ` pages of each (a view
of a job that logged millions of rows catches up over a few refreshes, saying so with
``catching_up``); metric series are kept downsampled as they grow (:class:`SeriesBuffer`), so
a refresh costs the same at 10 or 10 million logged steps.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from aviflow.attempts import finished_at, usage_from_events
from aviflow.backends.base import Backend
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.job import Job
from aviflow.paging import MAX_PAGE_ROWS, read_pages
from aviflow.records import CheckpointRef, Event, FailureInfo, JobMeta, JobState, MetricRow
from aviflow.spec import TrainJob
from aviflow.usage import flagged_idle, latest_usage

PRIMARY_METRIC = "loss"
MAX_POINTS = 300
PAGES_PER_READ = 5  # pages of events and of metric rows one refresh reads at most


@dataclass(frozen=True)
class RankState:
    rank: int
    node: int
    state: str


@dataclass(frozen=True)
class JobSnapshot:
    id: str
    name: str
    state: JobState
    attempt: int
    message: str
    queue_position: int | None
    nodes: int
    gpus_per_node: int
    submitted: float | None
    finished: float | None
    now: float
    gpu_hours: float
    ranks: tuple[RankState, ...]
    failure: FailureInfo | None
    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    metric_rows: int = 0
    checkpoints: tuple[CheckpointRef, ...] = ()
    log_ranks: tuple[int, ...] = ()
    # more events or metric rows were written than this snapshot has read: views read on
    # (also once the job has finished) until it is false
    catching_up: bool = False
    usage: dict[str, Any] | None = None  # the attempt's latest USAGE event's data
    used_hours: float | None = None  # allocated GPU-hours x mean utilization (measured)
    used_kind: str | None = None  # what was measured: "gpu" | "cpu"
    idle: str | None = None  # the attempt's IDLE flag, if it was flagged
    expected_start: Estimate | None = None  # while QUEUED (aviflow.estimate)
    wait: WaitNumbers | None = None  # while QUEUED: the numbers behind the wait

    @property
    def elapsed(self) -> float:
        if self.submitted is None:
            return 0.0
        return max(0.0, (self.finished or self.now) - self.submitted)


class SeriesBuffer:
    """One metric's points for a chart, downsampled as they arrive: every point while there
    are at most ``limit``, then the min and max of buckets of consecutive points (the first
    and last point always kept), buckets doubling in size as more arrive. Adding a point and
    reading the points are O(1) amortized (closed buckets' points are kept rendered); a step
    logged again (a restarted attempt re-logs from its checkpoint) drops the points from
    that step on."""

    def __init__(self, limit: int = MAX_POINTS) -> None:
        self.limit = max(4, limit)
        self.size = 1  # points per bucket
        self.buckets: list[list[Any]] = []  # [count, lo, hi] with lo/hi = (step, value)
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None
        self._closed: list[tuple[int, float]] = []  # points of every bucket but the last
        self._closed_buckets = 0

    def add(self, step: int, value: float) -> None:
        point = (step, value)
        if self.last is not None and step <= self.last[0]:
            self._rewind(step)
        if self.first is None:
            self.first = point
        self.last = point
        if self.buckets and self.buckets[-1][0] < self.size:
            b = self.buckets[-1]
            b[0] += 1
            if value < b[1][1]:
                b[1] = point
            if value > b[2][1]:
                b[2] = point
            return
        self.buckets.append([1, point, point])
        # single points while there are at most `limit`; then at most limit/2 buckets of
        # two points (lo, hi) each
        most = self.limit if self.size == 1 else self.limit // 2
        if len(self.buckets) > most:
            self._merge()

    def _merge(self) -> None:
        merged = []
        for i in range(0, len(self.buckets), 2):
            pair = self.buckets[i : i + 2]
            lo = min((b[1] for b in pair), key=lambda p: p[1])
            hi = max((b[2] for b in pair), key=lambda p: p[1])
            merged.append([sum(b[0] for b in pair), lo, hi])
        self.buckets = merged
        self.size *= 2
        self._closed, self._closed_buckets = [], 0

    def _rewind(self, step: int) -> None:
        while self.buckets and min(self.buckets[-1][1][0], self.buckets[-1][2][0]) >= step:
            self.buckets.pop()
        self._closed, self._closed_buckets = [], 0
        if not self.buckets:
            self.first = self.last = None
            self.size = 1
            return
        b = self.buckets[-1]
        self.last = max(b[1], b[2])
        b[0] = self.size  # a partly rewound bucket is closed

    @staticmethod
    def _bucket_points(bucket: list[Any]) -> list[tuple[int, float]]:
        lo, hi = bucket[1], bucket[2]
        return [lo] if lo == hi else sorted((lo, hi))

    def points(self) -> list[tuple[int, float]]:
        """The points to draw, in step order."""
        if not self.buckets:
            return []
        while self._closed_buckets < len(self.buckets) - 1:
            self._closed += self._bucket_points(self.buckets[self._closed_buckets])
            self._closed_buckets += 1
        out = self._closed + self._bucket_points(self.buckets[-1])
        if self.first is not None and out[0] != self.first:
            out.insert(0, self.first)
        if self.last is not None and out[-1] != self.last:
            out.append(self.last)
        return out

    def __len__(self) -> int:
        return sum(b[0] for b in self.buckets)


def add_rows(
    series: dict[str, SeriesBuffer], rows: list[MetricRow], limit: int = MAX_POINTS
) -> None:
    """Fold metric rows into per-metric buffers (numbers only; strings are not charted)."""
    for row in rows:
        for key, value in row.values.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            series.setdefault(key, SeriesBuffer(limit)).add(row.step, float(value))


def chart_points(series: dict[str, SeriesBuffer]) -> dict[str, list[tuple[int, float]]]:
    """Each metric's points, ``loss`` first, then in order of first appearance."""
    order = list(series)
    names = sorted(order, key=lambda n: (n != PRIMARY_METRIC, order.index(n)))
    return {n: series[n].points() for n in names}


def metric_series(
    rows: list[MetricRow], limit: int = MAX_POINTS
) -> dict[str, list[tuple[int, float]]]:
    """Numeric metrics by name from ``rows`` (see :class:`SeriesBuffer`)."""
    series: dict[str, SeriesBuffer] = {}
    add_rows(series, rows, limit)
    return chart_points(series)


def rank_states(
    state: JobState, nodes: int, per_node: int, failure: FailureInfo | None, started: set[int]
) -> tuple[RankState, ...]:
    """Per-rank state from the job state, the failure record and which ranks have output."""
    failed = failure.rank if failure else None
    failed_node = failure.node if failure else None
    out = []
    for rank in range(nodes * per_node):
        node = rank // per_node
        if state is JobState.RUNNING:
            s = "RUNNING" if rank in started else "STARTING"
        elif state is JobState.FAILED:
            s = (
                "FAILED"
                if rank == failed or (failed is None and node == failed_node)
                else "STOPPED"
            )
        else:
            s = state.value
        out.append(RankState(rank=rank, node=node, state=s))
    return tuple(out)


class SnapshotReader:
    """Reads a job for the panel; each :meth:`read` costs what changed since the last one."""

    def __init__(self, job: Job, limit: int = MAX_POINTS) -> None:
        self.job = job
        self.limit = limit
        self.spec: TrainJob | None = None
        self.meta: JobMeta | None = None
        self.events: list[Event] = []
        self.series: dict[str, SeriesBuffer] = {}
        self.metric_rows = 0
        self.catching_up = False
        self._events_at = 0
        self._metrics_at = 0

    def read(self, now: float | None = None) -> JobSnapshot:
        job, backend = self.job, self.job.backend
        if self.spec is None or self.meta is None:  # never change: read once
            self.spec, self.meta = job.spec, job.meta
        record = job.status_record()  # before the events, which are written first
        events = read_pages(
            lambda at: backend.events(job.id, at, MAX_PAGE_ROWS), self._events_at, PAGES_PER_READ
        )
        self.events.extend(events.items)
        self._events_at = events.next
        rows = read_pages(
            lambda at: backend.metrics(job.id, at, limit=MAX_PAGE_ROWS),
            self._metrics_at,
            PAGES_PER_READ,
        )
        add_rows(self.series, rows.items, self.limit)
        self.metric_rows += len(rows.items)
        self._metrics_at = rows.next
        self.catching_up = events.more or rows.more
        log_ranks = tuple(backend.ranks(job.id))
        checkpoints = tuple(backend.checkpoints(job.id))
        return self._snapshot(record, log_ranks, checkpoints, time.time() if now is None else now)

    def _snapshot(
        self,
        record: Any,
        log_ranks: tuple[int, ...],
        checkpoints: tuple[CheckpointRef, ...],
        now: float,
    ) -> JobSnapshot:
        assert self.spec is not None and self.meta is not None
        spec, state = self.spec.spec, record.state
        held = usage_from_events(self.events, spec.total_gpus, now)
        used = latest_usage(self.events, record.attempt)
        idle = flagged_idle(self.events, record.attempt)
        return JobSnapshot(
            id=self.job.id,
            name=self.spec.metadata.name,
            state=state,
            attempt=record.attempt,
            message=record.message,
            queue_position=record.queue_position,
            nodes=spec.nodes,
            gpus_per_node=spec.gpus_per_node,
            submitted=self.meta.submitted or (self.events[0].time if self.events else None),
            finished=finished_at(self.events) if state.is_finished() else None,
            now=now,
            gpu_hours=held.gpu_hours,
            used_hours=None if held.used_seconds is None else held.used_seconds / 3600,
            used_kind=held.used_kind,
            ranks=rank_states(
                state, spec.nodes, spec.gpus_per_node, record.failure, set(log_ranks)
            ),
            failure=record.failure,
            metrics=chart_points(self.series),
            metric_rows=self.metric_rows,
            checkpoints=checkpoints,
            log_ranks=log_ranks,
            catching_up=self.catching_up,
            usage=dict(used.data) if used is not None else None,
            idle=idle.message if idle is not None else None,
            expected_start=record.expected_start,
            wait=record.wait,
        )


def take_snapshot(job: Job, now: float | None = None) -> JobSnapshot:
    """Everything the panel shows, read once (a fresh reader)."""
    return SnapshotReader(job).read(now)


class SnapshotReaders:
    """A :class:`SnapshotReader` per recently viewed job (the ``kept`` last ones), for views
    that many requests read again (a page reload, a browser tab polling): each read of a kept
    job reads only what changed. Safe to share between threads; one job is read by one
    thread at a time."""

    def __init__(self, kept: int = 32) -> None:
        self.kept = kept
        self._lock = threading.Lock()
        self._readers: OrderedDict[str, tuple[threading.Lock, SnapshotReader]] = OrderedDict()

    def read(self, backend: Backend, job_id: str, now: float | None = None) -> JobSnapshot:
        with self._lock:
            found = self._readers.get(job_id)
            if found is None or found[1].job.backend is not backend:
                found = (threading.Lock(), SnapshotReader(Job(job_id, backend)))
                self._readers[job_id] = found
                while len(self._readers) > self.kept:
                    self._readers.popitem(last=False)
            self._readers.move_to_end(job_id)
        lock, reader = found
        with lock:
            return reader.read(now)

    def forget(self, job_id: str) -> None:
        """Drop the job's reader (it vanished or failed to read: the next read starts afresh)."""
        with self._lock:
            self._readers.pop(job_id, None)
