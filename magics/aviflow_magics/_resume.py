"""``--resume {auto,never,JOB_ID}``: find the checkpoint a new job starts from.

The choice travels with the job as ``code/init-checkpoint.json`` (``{"job", "step",
"path"}``); :func:`aviflow.resume` loads it when the job has no checkpoint of its own.
Everything is read through the backend interface, so any backend works.
"""

from __future__ import annotations

import json
from typing import Any

from aviflow.backends import Backend
from aviflow.errors import JobNotFound
from aviflow.tracking import INIT_CHECKPOINT_FILE
from aviflow_magics._options import OptionError


def _same_origin(meta: dict[str, Any], name: str, origin: dict[str, Any]) -> bool:
    if meta.get("name") == name:
        return True
    theirs = meta.get("origin") or {}
    return bool(origin.get("cell_id")) and theirs.get("cell_id") == origin.get("cell_id") \
        and theirs.get("notebook") == origin.get("notebook")


def find_resume_checkpoint(
    backend: Backend, mode: str, name: str, origin: dict[str, Any]
) -> dict[str, Any] | None:
    """The checkpoint to start from (``{"job", "step", "path"}``), or None to start fresh."""
    if mode == "never":
        return None
    if mode != "auto":
        try:
            found = backend.checkpoints(mode)
        except JobNotFound:
            raise OptionError(f"--resume: no job {mode!r}; %aviflow_jobs lists your jobs") from None
        if not found:
            raise OptionError(f"--resume: job {mode!r} has no complete checkpoint to start from")
        return {"job": mode, "step": int(found[-1]["step"]), "path": found[-1]["path"]}
    for job_id in reversed(backend.list_ids()):
        try:
            if not _same_origin(backend.meta(job_id), name, origin):
                continue
            found = backend.checkpoints(job_id)
        except JobNotFound:
            continue
        if found:
            return {"job": job_id, "step": int(found[-1]["step"]), "path": found[-1]["path"]}
    return None


def init_checkpoint_file(checkpoint: dict[str, Any]) -> dict[str, bytes]:
    """The bundle file that tells the job where to start from."""
    return {INIT_CHECKPOINT_FILE: json.dumps(checkpoint, indent=2).encode()}
