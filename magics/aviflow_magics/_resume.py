"""``--resume {auto,never,JOB_ID}``: find the checkpoint a new job starts from.

The choice travels with the job as ``spec.resumeFrom`` (a checkpoint reference: job id and
step); :func:`aviflow.resume` loads it, resolved against the run store as the job's nodes
mount it, when the job has no checkpoint of its own. Everything is read through the
backend interface, so any backend works.
"""

from __future__ import annotations

from typing import Any

from aviflow.backends import Backend
from aviflow.errors import JobNotFound
from aviflow.records import CheckpointRef, JobSummary
from aviflow_magics._options import OptionError


def _same_origin(summary: JobSummary, name: str, origin: dict[str, Any]) -> bool:
    if summary.name == name:
        return True
    theirs = summary.origin or {}
    return (
        bool(origin.get("cell_id"))
        and theirs.get("cell_id") == origin.get("cell_id")
        and theirs.get("notebook") == origin.get("notebook")
    )


def find_resume_checkpoint(
    backend: Backend, mode: str, name: str, origin: dict[str, Any]
) -> CheckpointRef | None:
    """The checkpoint to start from, or None to start fresh."""
    if mode == "never":
        return None
    if mode != "auto":
        try:
            found = backend.checkpoints(mode)
        except JobNotFound:
            raise OptionError(f"--resume: no job {mode!r}; %aviflow_jobs lists your jobs") from None
        if not found:
            raise OptionError(f"--resume: job {mode!r} has no complete checkpoint to start from")
        return found[-1]
    for summary in backend.summaries():  # newest first
        if not _same_origin(summary, name, origin):
            continue
        try:
            found = backend.checkpoints(summary.id)
        except JobNotFound:
            continue
        if found:
            return found[-1]
    return None
