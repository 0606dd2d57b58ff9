"""Ledger tables (SQLAlchemy 2): one row per job, one row per job attempt, one per
submission ``Idempotency-Key`` of the last day.

A job row holds what a list view shows (:class:`aviflow.records.JobSummary`) except
GPU-seconds, which are summed from the job's attempt rows when read. Free text (names,
messages) is ``Text``, so no length limit applies on PostgreSQL; ``failure`` and ``origin``
are JSON text.

Columns added after the first release are nullable: :func:`aviflow_hub.ledger.migrate.migrate`
adds them to a database an earlier version created, and the indexes it lacks. Listings read
the newest jobs first (``submitted``; a sidebar, one user's: ``user, submitted``), so both are
indexed: a page costs the same with 10 or 10,000 jobs in the ledger.
"""

from __future__ import annotations

from sqlalchemy import Boolean, Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    """A job the service knows: owner, team, queue, size and its latest status."""

    __tablename__ = "aviflow_jobs"
    __table_args__ = (Index("ix_aviflow_jobs_user_submitted", "user", "submitted"),)

    job_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(Text, default="")
    user: Mapped[str] = mapped_column(Text, index=True)
    team: Mapped[str | None] = mapped_column(Text, index=True, nullable=True)
    queue: Mapped[str] = mapped_column(Text)
    nodes: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)  # nodes x gpusPerNode
    submitted: Mapped[float] = mapped_column(Float, index=True)
    state: Mapped[str] = mapped_column(String(16))
    updated: Mapped[float] = mapped_column(Float)
    # since the typed contract (all nullable: see the module docstring)
    gpus_per_node: Mapped[int | None] = mapped_column(Integer, nullable=True)
    attempt: Mapped[int | None] = mapped_column(Integer, nullable=True)
    message: Mapped[str | None] = mapped_column(Text, nullable=True)
    queue_position: Mapped[int | None] = mapped_column(Integer, nullable=True)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    failure: Mapped[str | None] = mapped_column(Text, nullable=True)  # FailureInfo JSON
    origin: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON object
    # since the expected start (while QUEUED; JSON of aviflow.estimate's records)
    expected_start: Mapped[str | None] = mapped_column(Text, nullable=True)
    wait: Mapped[str | None] = mapped_column(Text, nullable=True)


class AttemptRow(Base):
    """One attempt of one job (:class:`aviflow.attempts.AttemptRecord`); keyed on (job id,
    attempt), so storing it again is an idempotent upsert."""

    __tablename__ = "aviflow_attempts"

    job_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(Text, index=True)
    team: Mapped[str | None] = mapped_column(Text, index=True, nullable=True)
    queue: Mapped[str] = mapped_column(Text)
    nodes: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)
    submitted: Mapped[float] = mapped_column(Float)
    admitted: Mapped[float] = mapped_column(Float)
    started: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str] = mapped_column(Text)
    restarts: Mapped[int] = mapped_column(Integer)
    preempted: Mapped[bool] = mapped_column(Boolean)
    queue_wait: Mapped[float] = mapped_column(Float)
    # since used GPU-hours (aviflow.usage; nullable: see the module docstring)
    use_kind: Mapped[str | None] = mapped_column(Text, nullable=True)  # "gpu" | "cpu"
    use_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    busy_seconds: Mapped[float | None] = mapped_column(Float, nullable=True)
    idle: Mapped[bool | None] = mapped_column(Boolean, nullable=True)


class SubmissionKeyRow(Base):
    """A client's ``Idempotency-Key`` on a submission: the job id aviflow-api chose for it
    and what was submitted (a hash), per user; kept a day (``Ledger.claim_key``)."""

    __tablename__ = "aviflow_submission_keys"

    user: Mapped[str] = mapped_column(String(255), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request: Mapped[str] = mapped_column(String(64))  # sha256 of the request, hex
    job_id: Mapped[str] = mapped_column(String(63))
    created: Mapped[float] = mapped_column(Float, index=True)
