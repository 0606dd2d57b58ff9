"""Ledger tables (SQLAlchemy 2): one row per job, one row per job attempt."""

from __future__ import annotations

from sqlalchemy import Boolean, Float, Integer, String
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class JobRow(Base):
    """A job the service knows: owner, team, queue and its latest state."""

    __tablename__ = "aviflow_jobs"

    job_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    user: Mapped[str] = mapped_column(String(255), index=True)
    team: Mapped[str | None] = mapped_column(String(63), index=True, nullable=True)
    queue: Mapped[str] = mapped_column(String(63))
    nodes: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)
    submitted: Mapped[float] = mapped_column(Float)
    state: Mapped[str] = mapped_column(String(16))
    updated: Mapped[float] = mapped_column(Float)


class AttemptRow(Base):
    """One attempt of one job; keyed on (job id, attempt) so ingestion is an idempotent upsert."""

    __tablename__ = "aviflow_attempts"

    job_id: Mapped[str] = mapped_column(String(63), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    user: Mapped[str] = mapped_column(String(255), index=True)
    team: Mapped[str | None] = mapped_column(String(63), index=True, nullable=True)
    queue: Mapped[str] = mapped_column(String(63))
    nodes: Mapped[int] = mapped_column(Integer)
    gpus: Mapped[int] = mapped_column(Integer)
    submitted: Mapped[float] = mapped_column(Float)
    admitted: Mapped[float] = mapped_column(Float)
    started: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16))
    restarts: Mapped[int] = mapped_column(Integer)
    preempted: Mapped[bool] = mapped_column(Boolean)
    queue_wait: Mapped[float] = mapped_column(Float)
