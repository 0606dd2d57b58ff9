"""Helpers of the ledger tests: a run store whose event logs a test writes by hand.

- ``T0``: the time of every job's submission (attempts cross midnight and the ISO week);
- :class:`StoreOnly`: a backend that only reads such a store (no processes);
- :func:`make_job`, :func:`emit`: a job, and events with the status they lead to;
- :func:`recomputed`, :func:`ledger_totals`: GPU-seconds per user from the event logs, and
  from the ledger.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from aviflow.attempts import attempts_from_events, usage
from aviflow.backends._store import StoreReads
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.records import Event, EventType, JobStatus, Owner
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore, atomic_write
from aviflow_hub.ledger import Ledger

T0 = 1_767_225_000.0  # 2025-12-31 23:50:00 UTC (midnight is T0 + 600): attempts cross midnight and the ISO week
E = EventType


class StoreOnly(StoreReads, Backend):
    """Reads a run store whose event logs the test writes by hand (no processes)."""

    name = "store-only"

    def __init__(self, root: Path) -> None:
        self.store = RunStore(root)

    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        raise NotImplementedError

    def status(self, job_id: str) -> JobStatus:
        return self.run_dir(job_id).status()

    def cancel(self, job_id: str) -> bool:
        raise NotImplementedError


def make_job(store: RunStore, name: str, user: str, team: str, nodes: int, gpus: int) -> RunDir:
    job = TrainJob.from_dict(
        {
            "apiVersion": "aviflow.dev/v1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"script": "pass", "nodes": nodes, "gpusPerNode": gpus, "queue": f"q-{team}"},
        }
    )
    run = store.create(job, {}, user, team=team, backend="store-only")
    atomic_write(run.meta_path, json.dumps(replace(run.meta(), submitted=T0).to_dict()))
    return run


def emit(run: RunDir, *events: tuple[EventType, int, float, dict[str, Any]]) -> None:
    """Append events and the status they lead to (as a backend records them)."""
    status = run.status()
    for kind, attempt, dt, data in events:
        event = Event(kind, attempt=attempt, time=T0 + dt, data=data)
        state = kind.state() or status.state
        status = JobStatus(
            state=state,
            attempt=attempt,
            message=kind.value.lower(),
            updated=event.time,
            failure=event.failure,
        )
        run.record([event], status)


def recomputed(backend: Backend) -> dict[str, float]:
    """GPU-seconds per user straight from the event logs (aviflow.attempts, from scratch)."""
    from aviflow.attempts import job_info

    out: dict[str, float] = {}
    for job_id in backend.list_ids():
        meta, spec = backend.meta(job_id), backend.spec(job_id)
        info = job_info(meta, spec)
        used = usage(attempts_from_events(info, backend.events(job_id).items), info.gpus, now=0)
        out[meta.user] = out.get(meta.user, 0.0) + used.gpu_seconds
    return out


def ledger_totals(ledger: Ledger) -> dict[str, float]:
    out: dict[str, float] = {}
    for a in ledger.attempts():
        assert a.finished is not None
        out[a.user] = out.get(a.user, 0.0) + a.gpu_seconds(now=0)
    return out


PREEMPTED_BY_A_KILL = {"failure": {"node": 1, "exitCode": -9}}  # killed from outside, no exception
CRASH = {"failure": {"rank": 3, "exception": "RuntimeError", "message": "boom"}}
