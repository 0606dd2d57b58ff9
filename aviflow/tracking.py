"""The training-side API: metrics and checkpoints from inside a job (or a notebook).

Inside a job its :class:`~aviflow.runtime.env.RuntimeEnv` names the run directory;
outside one, everything writes to ``./.aviflow/run``, so a script can be tried in a
notebook first::

    accelerator = Accelerator(log_with=aviflow.tracker())
    start = (aviflow.resume(accelerator) or 0) + 1
    for step in range(start, steps + 1):
        ...
        accelerator.log({"loss": loss.item()}, step=step)
        if step % 100 == 0:
            aviflow.save_checkpoint(accelerator, step)

Only the main process writes metrics. Nothing here imports torch or accelerate until a
function that needs them is called.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow.records import CheckpointRef, MetricRow
from aviflow.runtime.env import RuntimeEnv, process_rank
from aviflow.store import CHECKPOINT_MARKER, RunDir, RunStore, atomic_write

if TYPE_CHECKING:
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker


def run_dir() -> RunDir:
    """This job's run directory (or the local one outside a job)."""
    return RunDir(RuntimeEnv.current().run_dir)


def _number(value: Any) -> Any:
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"aviflow.log: {type(value).__name__} is not a number or string")


def log(values: dict[str, Any], step: int) -> None:
    """Record ``values`` (numbers, 0-d tensors or strings) at ``step``; main process only."""
    if not isinstance(values, dict) or not values:
        raise TypeError("aviflow.log: values must be a non-empty dict, e.g. {'loss': 0.5}")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"aviflow.log: step must be a non-negative int, got {step!r}")
    if process_rank() != 0:
        return
    node = RuntimeEnv.current()
    row = MetricRow(
        step=step,
        time=time.time(),
        attempt=node.attempt,
        values={str(k): _number(v) for k, v in values.items()},
    )
    run = RunDir(node.run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    run.append_metric(row)


def tracker() -> GeneralTracker:
    """An accelerate tracker: ``Accelerator(log_with=aviflow.tracker())``."""
    from aviflow._tracker import AviflowTracker

    return AviflowTracker()


def checkpoint_dir() -> Path:
    """Where this job's checkpoints live (created if missing)."""
    path = run_dir().checkpoints_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def checkpoints() -> list[CheckpointRef]:
    """Complete checkpoints of this run, oldest first."""
    return run_dir().checkpoints()


def save_checkpoint(
    accelerator: Accelerator, step: int, save: Callable[[Path], object] | None = None
) -> Path:
    """``accelerator.save_state`` into this job's checkpoint for ``step``; keeps the last K
    (``spec.checkpoints.keepLast``).

    Call it on every process. The directory only counts as a checkpoint once every
    process has written its part and the main process has added the marker file.
    ``save(directory)``, called on every process, writes the state instead of
    ``save_state`` (e.g. a torch Distributed Checkpoint of a sharded model, each rank its
    shard: :mod:`aviflow.examples.llm`).
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"aviflow.save_checkpoint: step must be a non-negative int, got {step!r}")
    node = RuntimeEnv.current()
    run = RunDir(node.run_dir)
    run.checkpoints_dir.mkdir(parents=True, exist_ok=True)
    final, staging = run.checkpoint_dir(step), run.checkpoint_staging(step)
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()
    if save is None:
        accelerator.save_state(str(staging))
    else:
        save(staging)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        marker = {"step": step, "time": time.time(), "attempt": node.attempt}
        atomic_write(final / CHECKPOINT_MARKER, json.dumps(marker))
        complete = run.checkpoints()
        for old in complete[: max(0, len(complete) - node.keep_last)]:
            shutil.rmtree(run.checkpoint_dir(old.step), ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def latest_checkpoint() -> CheckpointRef | None:
    found = checkpoints()
    return found[-1] if found else None


def init_checkpoint() -> CheckpointRef | None:
    """The checkpoint of another job this job was asked to start from (``spec.resumeFrom``)."""
    run = run_dir()
    if not run.has_runtime_spec():
        return None  # outside a job
    start = run.runtime_spec().spec.resume_from
    return CheckpointRef(start.job, start.step) if start is not None else None


def checkpoint_path(ref: CheckpointRef) -> Path:
    """Where ``ref`` is as this process sees the run store."""
    node = RuntimeEnv.current()
    run = RunDir(node.run_dir)
    if ref.job_id == run.id:
        return run.checkpoint_dir(ref.step)
    start = run.runtime_spec().spec.resume_from if run.has_runtime_spec() else None
    if (
        node.resume_dir is not None
        and start is not None
        and ref == CheckpointRef(start.job, start.step)
    ):
        return node.resume_dir  # mounted on its own (a pod sees only its job's directory)
    return RunStore(run.store_root).checkpoint_path(ref)


def resume(accelerator: Accelerator, load: Callable[[Path], object] | None = None) -> int | None:
    """Load the latest checkpoint into ``accelerator`` and return its step (None: start fresh).

    This job's own checkpoints come first (a restarted attempt continues where it stopped);
    without any, the job's initial checkpoint (see :func:`init_checkpoint`) is loaded.
    ``load(directory)`` reads what :func:`save_checkpoint`'s ``save`` wrote instead of
    ``load_state``.
    """
    latest = latest_checkpoint() or init_checkpoint()
    if latest is None:
        return None
    path = checkpoint_path(latest)
    if load is None:
        accelerator.load_state(str(path))
    else:
        load(path)
    return latest.step
