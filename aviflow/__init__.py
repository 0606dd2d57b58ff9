"""Aviflow: notebook cells to multi-node accelerate jobs, queued and accounted.

Submit and follow jobs::

    import aviflow
    job = aviflow.submit("train.yaml")          # a TrainJob YAML, dict or object
    job.wait(); job.metrics(); job.latest_checkpoint(); job.usage().gpu_hours

Inside the training script::

    accelerator = Accelerator(log_with=aviflow.tracker())
    start = (aviflow.resume(accelerator) or 0) + 1
    aviflow.log({"loss": loss}, step=step); aviflow.save_checkpoint(accelerator, step)

Importing aviflow is cheap: torch and accelerate are imported only by the functions that
need them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_EXPORTS = {
    "TrainJob": "aviflow.spec",
    "JobState": "aviflow.records",
    "JobStatus": "aviflow.records",
    "FailureInfo": "aviflow.records",
    "CheckpointRef": "aviflow.records",
    "QueueQuota": "aviflow.records",
    "Usage": "aviflow.attempts",
    "Job": "aviflow.job",
    "submit": "aviflow.api",
    "get": "aviflow.api",
    "jobs": "aviflow.api",
    "log": "aviflow.tracking",
    "tracker": "aviflow.tracking",
    "save_checkpoint": "aviflow.tracking",
    "resume": "aviflow.tracking",
    "checkpoint_dir": "aviflow.tracking",
    "AviflowError": "aviflow.errors",
    "SpecError": "aviflow.errors",
    "JobNotFound": "aviflow.errors",
    "BackendError": "aviflow.errors",
}

__all__ = [
    "AviflowError",
    "BackendError",
    "CheckpointRef",
    "FailureInfo",
    "Job",
    "JobNotFound",
    "JobState",
    "JobStatus",
    "QueueQuota",
    "SpecError",
    "TrainJob",
    "Usage",
    "__version__",
    "checkpoint_dir",
    "get",
    "jobs",
    "log",
    "resume",
    "save_checkpoint",
    "submit",
    "tracker",
]

if TYPE_CHECKING:
    from aviflow.api import get, jobs, submit
    from aviflow.attempts import Usage
    from aviflow.errors import AviflowError, BackendError, JobNotFound, SpecError
    from aviflow.job import Job
    from aviflow.records import CheckpointRef, FailureInfo, JobState, JobStatus, QueueQuota
    from aviflow.spec import TrainJob
    from aviflow.tracking import checkpoint_dir, log, resume, save_checkpoint, tracker


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'aviflow' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext aviflow``: register the notebook magics (see :mod:`aviflow_magics`)."""
    from aviflow_magics import load_ipython_extension as load

    load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """``%unload_ext aviflow``: stop the panels' background updates."""
    from aviflow_magics import unload_ipython_extension as unload

    unload(ipython)
