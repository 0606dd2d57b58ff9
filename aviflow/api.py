"""``submit``, ``get`` and ``jobs``: the Python API over any backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aviflow.backends import Backend, get_backend
from aviflow.bundle import build_bundle
from aviflow.errors import SpecError
from aviflow.job import Job
from aviflow.spec import TrainJob


def load_spec(spec: TrainJob | dict[str, Any] | str | Path) -> tuple[TrainJob, Path | None]:
    """A validated TrainJob, and the directory its relative paths are relative to."""
    if isinstance(spec, TrainJob):
        return spec, None
    if isinstance(spec, dict):
        return TrainJob.from_dict(spec), None
    if isinstance(spec, str | Path):
        path = Path(spec)
        if not path.is_file():
            raise SpecError(f"{path}: no such spec file")
        return TrainJob.load(path), path.resolve().parent
    raise SpecError(f"a spec is a TrainJob, a dict or a YAML path, not {type(spec).__name__}")


def submit(
    spec: TrainJob | dict[str, Any] | str | Path,
    backend: str | Backend | None = None,
    *,
    base_dir: str | Path | None = None,
    extra_files: dict[str, bytes] | None = None,
    origin: dict[str, Any] | None = None,
) -> Job:
    """Validate ``spec``, snapshot its code and submit it. Nothing is written if it is invalid."""
    job, spec_dir = load_spec(spec)
    bundle = build_bundle(job, base_dir or spec_dir, extra_files=extra_files, origin=origin)
    chosen = get_backend(backend)
    return Job(chosen.submit(job, bundle), chosen)


def get(job_id: str, backend: str | Backend | None = None) -> Job:
    """Re-attach to a job by id (raises :class:`~aviflow.errors.JobNotFound`)."""
    chosen = get_backend(backend)
    chosen.status(job_id)
    return Job(job_id, chosen)


def jobs(backend: str | Backend | None = None) -> list[Job]:
    """Every job the backend knows, oldest first."""
    chosen = get_backend(backend)
    return [Job(i, chosen) for i in chosen.list_ids()]
