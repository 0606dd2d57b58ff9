"""A point-in-time view of a job, read through the :class:`~aviflow.job.Job` interface.

The panel's widgets render snapshots; they never read the job themselves, so the same
snapshot feeds a live panel, a re-attached one (replayed from the run store) and tests.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aviflow.job import Job
from aviflow.spec import TrainJob
from aviflow.status import JobState, usage_from_events

PRIMARY_METRIC = "loss"


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
    failure: dict[str, Any] | None
    metrics: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    metric_rows: int = 0
    checkpoints: tuple[dict[str, Any], ...] = ()
    log_ranks: tuple[int, ...] = ()

    @property
    def elapsed(self) -> float:
        if self.submitted is None:
            return 0.0
        return max(0.0, (self.finished or self.now) - self.submitted)


def metric_series(rows: list[dict[str, Any]]) -> dict[str, list[tuple[int, float]]]:
    """Numeric metrics by name, ``loss`` first, then in order of first appearance; a step
    logged again (by a restarted attempt) replaces the earlier value."""
    series: dict[str, dict[int, float]] = {}
    for row in rows:
        step = row.get("step")
        if not isinstance(step, int):
            continue
        for key, value in row.items():
            if key in ("step", "time", "attempt"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            series.setdefault(key, {})[step] = float(value)
    names = sorted(series, key=lambda n: (n != PRIMARY_METRIC, list(series).index(n)))
    return {n: sorted(series[n].items()) for n in names}


def rank_states(state: JobState, nodes: int, per_node: int, failure: dict[str, Any] | None,
                started: set[int]) -> tuple[RankState, ...]:
    """Per-rank state from the job state, the failure record and which ranks have output."""
    failed = failure.get("rank") if failure else None
    failed_node = failure.get("node") if failure else None
    out = []
    for rank in range(nodes * per_node):
        node = rank // per_node
        if state is JobState.RUNNING:
            s = "RUNNING" if rank in started else "STARTING"
        elif state is JobState.FAILED:
            s = "FAILED" if rank == failed or (failed is None and node == failed_node) else "STOPPED"
        else:
            s = state.value
        out.append(RankState(rank=rank, node=node, state=s))
    return tuple(out)


def take_snapshot(job: Job, now: float | None = None, spec: TrainJob | None = None,
                  meta: dict[str, Any] | None = None) -> JobSnapshot:
    """Read everything the panel shows, once (``spec`` and ``meta`` never change: pass
    them in to skip reading them again)."""
    now = time.time() if now is None else now
    backend = job.backend
    record = job.status_record()
    state = JobState(record.get("state", JobState.QUEUED))
    spec = spec if spec is not None else job.spec
    events = job.events()
    meta = meta if meta is not None else backend.meta(job.id)
    failure = record.get("failure")
    rows = job.metric_rows()
    log_ranks = tuple(backend.ranks(job.id))
    finished = next((e.time for e in reversed(events) if e.type in (s.value for s in JobState)
                     and JobState(e.type).is_finished()), None) if state.is_finished() else None
    return JobSnapshot(
        id=job.id,
        name=spec.metadata.name,
        state=state,
        attempt=int(record.get("attempt") or 0),
        message=str(record.get("message") or ""),
        queue_position=record.get("queuePosition"),
        nodes=spec.spec.nodes,
        gpus_per_node=spec.spec.gpus_per_node,
        submitted=meta.get("submitted") or (events[0].time if events else None),
        finished=finished,
        now=now,
        gpu_hours=usage_from_events(events, spec.spec.total_gpus, now=now).gpu_hours,
        ranks=rank_states(state, spec.spec.nodes, spec.spec.gpus_per_node, failure, set(log_ranks)),
        failure=failure,
        metrics=metric_series(rows),
        metric_rows=len(rows),
        checkpoints=tuple(job.checkpoints()),
        log_ranks=log_ranks,
    )
