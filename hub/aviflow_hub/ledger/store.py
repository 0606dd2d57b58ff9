"""The ledger database: one row per job (what a list view shows), one per job attempt, and
the submissions' idempotency keys (:meth:`Ledger.claim_key`).

The service feeds it from the backend's change feed (:meth:`Ledger.apply`): each
:class:`~aviflow.backends._feed.JobChange` carries a job's new status and only its new
events, which are folded onto the job's stored attempt rows
(:func:`aviflow.attempts.fold_attempts`), so an update costs what changed. Rows are upserted
on their keys (job id; job id and attempt), so applying a change again, after a service
restart or a feed that starts over (``reset``), never double counts. A job that cannot be
stored is reported and skipped; a row that cannot be read back is logged and left out, so
one bad job never breaks a listing.

>>> ledger = Ledger("sqlite://")          # in memory
>>> ledger.attempts(), ledger.summaries()
([], [])
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import Float, create_engine, delete, exists, func, literal, or_, select
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import StaticPool

from aviflow._model import short
from aviflow.attempts import AttemptRecord, JobInfo, finished_at, fold_attempts
from aviflow.backends._feed import JobChange
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import FailureInfo, JobState, JobSummary
from aviflow_hub.authz import Visibility
from aviflow_hub.ledger.migrate import migrate
from aviflow_hub.ledger.models import AttemptRow, Base, JobRow, SubmissionKeyRow

log = logging.getLogger("aviflow_hub.ledger")
_ATTEMPT_KEYS = ("job_id", "attempt")
_FINISHED = [s.value for s in JobState if s.is_finished()]
_JOBS = JobRow.__table__
_ATTEMPTS = AttemptRow.__table__
_KEYS = SubmissionKeyRow.__table__
USAGE_BATCH = 500  # job ids per query when summing a listing's GPU-seconds
KEY_SECONDS = 24 * 3600.0  # how long a submission's Idempotency-Key names its job


def _insert_for(engine: Engine) -> Any:
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    elif engine.dialect.name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    else:
        raise ValueError(f"the ledger supports SQLite and PostgreSQL, not {engine.dialect.name}")
    return insert


class Ledger:
    def __init__(self, url: str) -> None:
        kw: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kw["connect_args"] = {"check_same_thread": False}
            if url in ("sqlite://", "sqlite:///:memory:"):
                kw["poolclass"] = StaticPool  # one shared in-memory database
        self.engine = create_engine(url, **kw)
        self._insert = _insert_for(self.engine)
        migrate(self.engine)  # tables of an earlier version get the new columns
        Base.metadata.create_all(self.engine)
        self._unreadable: set[tuple[str, str]] = set()

    def close(self) -> None:
        self.engine.dispose()

    # -- writing ---------------------------------------------------------------------------------
    def _upsert(
        self, session: Session, model: type[Base], rows: list[dict[str, Any]], keys: tuple[str, ...]
    ) -> None:
        if not rows:
            return
        stmt = self._insert(model).values(rows)
        stmt = stmt.on_conflict_do_update(
            index_elements=list(keys),
            set_={c: getattr(stmt.excluded, c) for c in rows[0] if c not in keys},
        )
        session.execute(stmt)

    def record_job(self, summary: JobSummary) -> None:
        """Record a job just submitted (so its submitter sees it at once). A row the change
        feed wrote first is newer and is kept."""
        values = {
            **_shape(
                summary.name,
                summary.user,
                summary.team,
                summary.queue,
                summary.nodes,
                summary.gpus_per_node,
                summary.submitted,
                summary.origin,
            ),
            **_status_values(
                summary.state,
                summary.attempt,
                summary.message,
                summary.queue_position,
                summary.updated or summary.submitted,
                summary.finished,
                summary.failure,
                summary.expected_start,
                summary.wait,
            ),
            "job_id": summary.id,
        }
        with Session(self.engine) as s, s.begin():
            s.execute(self._insert(JobRow).values([values]).on_conflict_do_nothing())

    def claim_key(
        self, user: str, key: str, request: str, job_id: str, now: float | None = None
    ) -> tuple[str, str]:
        """The job id and request hash of ``user``'s idempotency ``key``: ``job_id`` and
        ``request`` when the key is new (recorded now), else those recorded first. Keys
        older than :data:`KEY_SECONDS` are forgotten (every user's, here: the table holds a
        day of keys)."""
        now = time.time() if now is None else now
        with Session(self.engine) as s, s.begin():
            s.execute(delete(_KEYS).where(_KEYS.c.created < now - KEY_SECONDS))
            row = {"user": user, "key": key, "request": request, "job_id": job_id, "created": now}
            s.execute(self._insert(SubmissionKeyRow).values([row]).on_conflict_do_nothing())
            found = s.execute(
                select(_KEYS.c.job_id, _KEYS.c.request).where(
                    _KEYS.c.user == user, _KEYS.c.key == key
                )
            ).one()
            return str(found.job_id), str(found.request)

    def apply(self, changes: Iterable[JobChange]) -> dict[str, str]:
        """Store each job's change in its own transaction; return ``{job id: problem}`` for
        the jobs that could not be stored (logged; the others are stored regardless)."""
        problems: dict[str, str] = {}
        now = time.time()
        for change in changes:
            try:
                self._apply(change, now)
            except Exception as exc:  # one job's bad data or a failed write: report, go on
                problems[change.job_id] = f"{type(exc).__name__}: {short(str(exc), 300)}"
                log.warning(
                    "job %s not stored in the ledger: %s", change.job_id, problems[change.job_id]
                )
        return problems

    def _apply(self, change: JobChange, now: float) -> None:
        with Session(self.engine) as s, s.begin():
            row = s.execute(select(_JOBS).where(_JOBS.c.job_id == change.job_id)).mappings().first()
            info = change.info or (_info(row) if row is not None else None)
            if info is None:
                raise LookupError("the ledger has no row of this job and the change has no meta")
            before = [] if change.reset else _read_attempts(s, change.job_id)
            after = fold_attempts(info, before, change.events)
            status = change.status
            finished = None
            if status.state.is_finished():
                finished = (
                    finished_at(change.events)
                    or (row["finished"] if row else None)
                    or status.updated
                    or now
                )
            if change.meta is not None and change.spec is not None:
                spec = change.spec.spec
                shape = _shape(
                    change.meta.name,
                    change.meta.user,
                    change.meta.team,
                    spec.queue,
                    spec.nodes,
                    spec.gpus_per_node,
                    change.meta.submitted,
                    change.meta.origin,
                )
            else:
                assert row is not None
                shape = {k: row[k] for k in _SHAPE_KEYS}
            values = {
                **shape,
                **_status_values(
                    status.state,
                    status.attempt,
                    status.message,
                    status.queue_position,
                    status.updated or now,
                    finished,
                    status.failure,
                    status.expected_start,
                    status.wait,
                ),
                "job_id": change.job_id,
            }
            self._upsert(s, JobRow, [values], ("job_id",))
            fresh = [_attempt_values(a) for a in after if a not in before]
            self._upsert(s, AttemptRow, fresh, _ATTEMPT_KEYS)
            if change.reset:  # the feed started over: what it did not report is gone
                kept = [a.attempt for a in after]
                s.execute(
                    delete(AttemptRow).where(
                        AttemptRow.job_id == change.job_id, AttemptRow.attempt.not_in(kept)
                    )
                )

    # -- reading ---------------------------------------------------------------------------------
    def finished_ids(self) -> set[str]:
        """Jobs that are finished with every attempt closed: the change feed skips them."""
        open_attempt = exists().where(
            _ATTEMPTS.c.job_id == _JOBS.c.job_id, _ATTEMPTS.c.finished.is_(None)
        )
        q = select(_JOBS.c.job_id).where(_JOBS.c.state.in_(_FINISHED), ~open_attempt)
        with self.engine.connect() as conn:
            return set(conn.scalars(q))

    def summaries(
        self,
        limit: int | None = None,
        seen: Visibility | None = None,
        *,
        unfinished: bool = False,
        user: str | None = None,
        now: float | None = None,
    ) -> list[JobSummary]:
        """Jobs newest first (those ``seen`` allows; only unfinished ones, or ``user``'s, if
        asked), with the GPU-seconds of their attempts (open ones up to ``now``). Unreadable
        rows are left out."""
        now = time.time() if now is None else now
        held = func.coalesce(_ATTEMPTS.c.finished, literal(now, Float)) - _ATTEMPTS.c.admitted
        gpu_seconds = func.sum(_ATTEMPTS.c.gpus * held).label("gpu_seconds")
        q = select(_JOBS)
        if seen is not None and not seen.everything:
            q = q.where(
                or_(_JOBS.c.user.in_(sorted(seen.users)), _JOBS.c.team.in_(sorted(seen.teams)))
            )
        if unfinished:
            q = q.where(_JOBS.c.state.not_in(_FINISHED))
        if user is not None:
            q = q.where(_JOBS.c.user == user)
        q = q.order_by(_JOBS.c.submitted.desc(), _JOBS.c.job_id.desc())
        if limit is not None:
            q = q.limit(limit)
        with self.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(q).mappings()]
            # the GPU-seconds of the jobs listed only (a page costs its jobs' attempts, never
            # the whole history's), in batches the database's parameter limits allow
            ids = [r["job_id"] for r in rows]
            used: dict[str, float] = {}
            for at in range(0, len(ids), USAGE_BATCH):
                batch = ids[at : at + USAGE_BATCH]
                summed = select(_ATTEMPTS.c.job_id, gpu_seconds).where(
                    _ATTEMPTS.c.job_id.in_(batch)
                )
                for job_id, seconds in conn.execute(summed.group_by(_ATTEMPTS.c.job_id)):
                    used[job_id] = seconds
        for r in rows:
            r["gpu_seconds"] = used.get(r["job_id"])
        return self._readable(rows, _summary)

    def job(self, job_id: str, now: float | None = None) -> JobSummary | None:
        """One job's summary (None: unknown, or its row cannot be read)."""
        now = time.time() if now is None else now
        held = func.coalesce(_ATTEMPTS.c.finished, literal(now, Float)) - _ATTEMPTS.c.admitted
        gpu_seconds = (
            select(func.sum(_ATTEMPTS.c.gpus * held))
            .where(_ATTEMPTS.c.job_id == job_id)
            .scalar_subquery()
        )
        q = select(_JOBS, gpu_seconds.label("gpu_seconds")).where(_JOBS.c.job_id == job_id)
        with self.engine.connect() as conn:
            rows = list(conn.execute(q).mappings())
        found = self._readable(rows, _summary)
        return found[0] if found else None

    def attempts(self, seen: Visibility | None = None) -> list[AttemptRecord]:
        """Attempt rows (those ``seen`` allows) in admission order; unreadable ones left out."""
        q = select(_ATTEMPTS)
        if seen is not None and not seen.everything:
            q = q.where(
                or_(
                    _ATTEMPTS.c.user.in_(sorted(seen.users)),
                    _ATTEMPTS.c.team.in_(sorted(seen.teams)),
                )
            )
        q = q.order_by(_ATTEMPTS.c.admitted, _ATTEMPTS.c.job_id, _ATTEMPTS.c.attempt)
        with self.engine.connect() as conn:
            rows = list(conn.execute(q).mappings())
        return self._readable(rows, _attempt)

    def state_counts(self) -> dict[str, int]:
        """Number of jobs per state."""
        q = select(_JOBS.c.state, func.count()).group_by(_JOBS.c.state)
        with self.engine.connect() as conn:
            return {str(state): int(n) for state, n in conn.execute(q)}

    def _readable(self, rows: list[Mapping[str, Any]], parse: Any) -> list[Any]:
        out = []
        for row in rows:
            try:
                out.append(parse(row))
            except (KeyError, TypeError, ValueError, OverflowError) as exc:
                key = (str(row.get("job_id")), f"{type(exc).__name__}: {short(str(exc), 200)}")
                if key not in self._unreadable:  # once per row and problem, not per request
                    self._unreadable.add(key)
                    log.warning("ledger row of job %s cannot be read, skipped: %s", *key)
        return out


# -- rows <-> records ----------------------------------------------------------------------------
_SHAPE_KEYS = (
    "name",
    "user",
    "team",
    "queue",
    "nodes",
    "gpus",
    "gpus_per_node",
    "submitted",
    "origin",
)


def storable(text: str) -> str:
    """``text`` with what SQLite or PostgreSQL cannot hold (lone surrogates, NUL) replaced."""
    return text.encode("utf-8", "replace").decode("utf-8").replace("\x00", "\ufffd")


def _opt_text(text: str | None) -> str | None:
    return None if text is None else storable(text)


def _shape(
    name: str,
    user: str,
    team: str | None,
    queue: str,
    nodes: int,
    gpus_per_node: int,
    submitted: float,
    origin: Mapping[str, Any],
) -> dict[str, Any]:
    return {
        "name": storable(name),
        "user": storable(user),
        "team": _opt_text(team),
        "queue": storable(queue),
        "nodes": nodes,
        "gpus": nodes * gpus_per_node,
        "gpus_per_node": gpus_per_node,
        "submitted": submitted,
        "origin": json.dumps(dict(origin)),  # ASCII: storable whatever it holds
    }


def _status_values(
    state: JobState,
    attempt: int,
    message: str,
    queue_position: int | None,
    updated: float,
    finished: float | None,
    failure: FailureInfo | None,
    expected_start: Estimate | None = None,
    wait: WaitNumbers | None = None,
) -> dict[str, Any]:
    return {
        "state": state.value,
        "attempt": attempt,
        "message": storable(message),
        "queue_position": queue_position,
        "updated": updated,
        "finished": finished,
        "failure": json.dumps(failure.to_dict()) if failure is not None else None,
        "expected_start": _opt_json(expected_start),
        "wait": _opt_json(wait),
    }


def _opt_json(record: Estimate | WaitNumbers | None) -> str | None:
    return None if record is None else storable(json.dumps(record.to_dict()))


def _attempt_values(a: AttemptRecord) -> dict[str, Any]:
    out = a.to_dict()
    for key in ("user", "queue", "outcome"):
        out[key] = storable(out[key])
    out["team"] = _opt_text(out["team"])
    return out


def _json_object(text: str | None) -> dict[str, Any] | None:
    if text is None or text == "":
        return None
    found = json.loads(text)
    if not isinstance(found, dict):
        raise ValueError(f"not a JSON object: {short(text)}")
    return found


def _opt(value: Any, kind: type) -> Any:
    return None if value is None else kind(value)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {short(value)}")
    return value


def _summary(row: Mapping[str, Any]) -> JobSummary:
    nodes, gpus = int(row["nodes"]), int(row["gpus"])
    per_node = row["gpus_per_node"]
    failure = _json_object(row["failure"])
    return JobSummary(
        id=_str(row["job_id"]),
        name=_str(row["name"] or ""),
        user=_str(row["user"]),
        team=None if row["team"] is None else _str(row["team"]),
        queue=_str(row["queue"]),
        nodes=nodes,
        gpus_per_node=int(per_node) if per_node is not None else (gpus // nodes if nodes else 0),
        state=JobState(row["state"]),
        attempt=int(row["attempt"] or 0),
        message=_str(row["message"] or ""),
        queue_position=_opt(row["queue_position"], int),
        submitted=float(row["submitted"]),
        updated=_opt(row["updated"], float),
        finished=_opt(row["finished"], float),
        gpu_seconds=max(float(row["gpu_seconds"] or 0.0), 0.0),
        failure=FailureInfo.from_dict(failure) if failure is not None else None,
        origin=_json_object(row["origin"]) or {},
        expected_start=Estimate.from_dict(_json_object(row.get("expected_start"))),
        wait=WaitNumbers.from_dict(_json_object(row.get("wait"))),
    )


def _attempt(row: Mapping[str, Any]) -> AttemptRecord:
    return AttemptRecord(
        job_id=_str(row["job_id"]),
        attempt=int(row["attempt"]),
        user=_str(row["user"]),
        team=None if row["team"] is None else _str(row["team"]),
        queue=_str(row["queue"]),
        nodes=int(row["nodes"]),
        gpus=int(row["gpus"]),
        submitted=float(row["submitted"]),
        admitted=float(row["admitted"]),
        started=_opt(row["started"], float),
        finished=_opt(row["finished"], float),
        outcome=_str(row["outcome"]),
        restarts=int(row["restarts"]),
        preempted=bool(row["preempted"]),
        queue_wait=float(row["queue_wait"]),
        use_kind=row["use_kind"] if row["use_kind"] in ("gpu", "cpu") else None,
        use_seconds=max(float(row["use_seconds"] or 0.0), 0.0),
        busy_seconds=max(float(row["busy_seconds"] or 0.0), 0.0),
        idle=bool(row["idle"]),
    )


def _read_attempts(session: Session, job_id: str) -> list[AttemptRecord]:
    q = select(_ATTEMPTS).where(_ATTEMPTS.c.job_id == job_id).order_by(_ATTEMPTS.c.attempt)
    return [_attempt(r) for r in session.execute(q).mappings()]


def _info(row: Mapping[str, Any]) -> JobInfo:
    return JobInfo(
        job_id=_str(row["job_id"]),
        user=_str(row["user"]),
        team=None if row["team"] is None else _str(row["team"]),
        queue=_str(row["queue"]),
        nodes=int(row["nodes"]),
        gpus=int(row["gpus"]),
        submitted=float(row["submitted"]),
        name=_str(row["name"] or ""),
    )
