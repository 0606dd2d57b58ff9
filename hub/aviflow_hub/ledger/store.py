"""The ledger database: record jobs, ingest their event logs, read attempts back.

Ingestion is an upsert keyed on (job id, attempt) of rows recomputed from the whole event
log, so running it again (after a service restart, or twice at once) never double counts.

>>> ledger = Ledger("sqlite://")          # in memory
>>> ledger.attempts()
[]
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from sqlalchemy import create_engine, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from aviflow.backends.base import Backend
from aviflow.errors import JobNotFound
from aviflow.status import Event, JobState
from aviflow_hub.ledger.attempts import AttemptRecord, JobInfo, attempts_from_events, job_state
from aviflow_hub.ledger.models import AttemptRow, Base, JobRow

_ATTEMPT_KEYS = ("job_id", "attempt")


def _insert_for(engine: Engine) -> Any:
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif engine.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise ValueError(f"the ledger supports SQLite and PostgreSQL, not {engine.dialect.name}")
    return insert


def job_info_from_backend(backend: Backend, job_id: str) -> JobInfo:
    """Owner and shape of a job from its run-store record (``origin.hub`` set by the service)."""
    meta = backend.meta(job_id)
    spec = backend.spec(job_id)
    hub = (meta.get("origin") or {}).get("hub") or {}
    return JobInfo(job_id=job_id, user=hub.get("user") or meta.get("user", ""),
                   team=hub.get("team"), queue=spec.spec.queue, nodes=spec.spec.nodes,
                   gpus=spec.spec.total_gpus, submitted=float(meta.get("submitted", 0.0)),
                   name=spec.metadata.name)


class Ledger:
    def __init__(self, url: str) -> None:
        kw: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kw["connect_args"] = {"check_same_thread": False}
            if url in ("sqlite://", "sqlite:///:memory:"):
                kw["poolclass"] = StaticPool  # one shared in-memory database
        self.engine = create_engine(url, **kw)
        self._insert = _insert_for(self.engine)
        Base.metadata.create_all(self.engine)

    def close(self) -> None:
        self.engine.dispose()

    # -- writing ------------------------------------------------------------------------------
    def _upsert(self, session: Session, model: type[Base], rows: list[dict[str, Any]],
                keys: tuple[str, ...]) -> None:
        if not rows:
            return
        stmt = self._insert(model).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(keys),
            set_={c: getattr(stmt.excluded, c) for c in rows[0] if c not in keys},
        )
        session.execute(stmt)

    def record_job(self, info: JobInfo, state: str = JobState.QUEUED.value) -> None:
        with Session(self.engine) as s, s.begin():
            self._upsert(s, JobRow, [_job_row(info, state)], ("job_id",))

    def record_events(self, info: JobInfo, events: list[Event]) -> list[AttemptRecord]:
        """Upsert the job and every attempt its events describe."""
        attempts = attempts_from_events(info, events)
        with Session(self.engine) as s, s.begin():
            self._upsert(s, JobRow, [_job_row(info, job_state(events))], ("job_id",))
            self._upsert(s, AttemptRow, [a.to_dict() for a in attempts], _ATTEMPT_KEYS)
        return attempts

    def ingest(self, backend: Backend, job_ids: Iterable[str] | None = None) -> int:
        """Bring every unfinished (or unseen) job of ``backend`` up to date; return how many."""
        finished = {j["job_id"] for j in self.jobs() if JobState(j["state"]).is_finished()}
        known = {j["job_id"]: j for j in self.jobs()}
        count = 0
        for job_id in job_ids if job_ids is not None else backend.list_ids():
            if job_id in finished:
                continue
            try:
                row = known.get(job_id)
                info = _info_from_row(row) if row else job_info_from_backend(backend, job_id)
                events = backend.events(job_id)
                if job_state(events) != JobState.QUEUED:
                    # Let the backend record an end only it can notice (a dead supervisor).
                    # Not for QUEUED jobs: one may be mid-submission, its supervisor not up yet.
                    backend.status(job_id)
                    events = backend.events(job_id)
                self.record_events(info, events)
            except JobNotFound:
                continue
            count += 1
        return count

    # -- reading ------------------------------------------------------------------------------
    def jobs(self) -> list[dict[str, Any]]:
        with Session(self.engine) as s:
            return [_as_dict(r) for r in s.scalars(select(JobRow).order_by(JobRow.submitted))]

    def job(self, job_id: str) -> dict[str, Any] | None:
        with Session(self.engine) as s:
            row = s.get(JobRow, job_id)
            return _as_dict(row) if row else None

    def attempts(self) -> list[AttemptRecord]:
        with Session(self.engine) as s:
            rows = s.scalars(select(AttemptRow).order_by(AttemptRow.admitted, AttemptRow.job_id))
            return [AttemptRecord(**_as_dict(r)) for r in rows]


def _job_row(info: JobInfo, state: str) -> dict[str, Any]:
    return {"job_id": info.job_id, "name": info.name, "user": info.user, "team": info.team,
            "queue": info.queue, "nodes": info.nodes, "gpus": info.gpus,
            "submitted": info.submitted, "state": state, "updated": time.time()}


def _info_from_row(row: dict[str, Any]) -> JobInfo:
    return JobInfo(job_id=row["job_id"], user=row["user"], team=row["team"], queue=row["queue"],
                   nodes=row["nodes"], gpus=row["gpus"], submitted=row["submitted"], name=row["name"])


def _as_dict(row: Base) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}
