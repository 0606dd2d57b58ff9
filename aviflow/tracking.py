"""The training-side API: metrics and checkpoints from inside a job (or a notebook).

Inside a job the runtime sets ``AVIFLOW_RUN_DIR``; outside one, everything writes to a
local run directory (``$AVIFLOW_RUN_DIR`` or ``./.aviflow/run``), so a script can be tried
in a notebook first::

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow.store import (
    CHECKPOINT_MARKER,
    RunDir,
    append_line,
    atomic_write,
    read_json,
    scan_checkpoints,
)

if TYPE_CHECKING:
    from accelerate import Accelerator
    from accelerate.tracking import GeneralTracker

_CHECKPOINT_PREFIX = "step-"
# A job started from another job's checkpoint (``%%aviflow_train --resume``) ships
# ``code/init-checkpoint.json`` = {"path": ..., "step": ..., "job": ...}.
INIT_CHECKPOINT_FILE = "init-checkpoint.json"


def run_dir() -> RunDir:
    """This job's run directory (or the local one outside a job)."""
    path = Path(os.environ.get("AVIFLOW_RUN_DIR") or Path.cwd() / ".aviflow" / "run")
    return RunDir(path)


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _attempt() -> int:
    return int(os.environ.get("AVIFLOW_ATTEMPT", "1"))


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
    if _rank() != 0:
        return
    row = {
        "step": step,
        "time": time.time(),
        "attempt": _attempt(),
        "values": {str(k): _number(v) for k, v in values.items()},
    }
    path = run_dir().metrics_path
    path.parent.mkdir(parents=True, exist_ok=True)
    append_line(path, row)


def tracker() -> GeneralTracker:
    """An accelerate tracker: ``Accelerator(log_with=aviflow.tracker())``."""
    from aviflow._tracker import AviflowTracker

    return AviflowTracker()


def checkpoint_dir() -> Path:
    """Where this job's checkpoints live (created if missing)."""
    path = Path(os.environ.get("AVIFLOW_CHECKPOINT_DIR") or run_dir().checkpoints_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def _keep_last() -> int:
    return int(os.environ.get("AVIFLOW_KEEP_LAST", "3"))


def checkpoints() -> list[dict[str, Any]]:
    """Complete checkpoints of this run, oldest first."""
    return scan_checkpoints(checkpoint_dir())


def save_checkpoint(accelerator: Accelerator, step: int) -> Path:
    """``accelerator.save_state`` into ``checkpoints/step-<N>``; keeps the last K (spec).

    Call it on every process. The directory only counts as a checkpoint once every
    process has written its part and the main process has added the marker file.
    """
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise TypeError(f"aviflow.save_checkpoint: step must be a non-negative int, got {step!r}")
    root = checkpoint_dir()
    final = root / f"{_CHECKPOINT_PREFIX}{step:09d}"
    staging = root / f".{final.name}.partial"
    if accelerator.is_main_process:
        shutil.rmtree(staging, ignore_errors=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(staging))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(staging, final)
        marker = {"step": step, "time": time.time(), "attempt": _attempt()}
        atomic_write(final / CHECKPOINT_MARKER, json.dumps(marker))
        complete = checkpoints()
        for old in complete[: max(0, len(complete) - _keep_last())]:
            shutil.rmtree(old["path"], ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def latest_checkpoint() -> dict[str, Any] | None:
    found = checkpoints()
    return found[-1] if found else None


def init_checkpoint() -> dict[str, Any] | None:
    """The checkpoint this job was asked to start from (another job's), if any."""
    record = read_json(run_dir().code_dir / INIT_CHECKPOINT_FILE)
    return record if isinstance(record, dict) and record.get("path") else None


def resume(accelerator: Accelerator) -> int | None:
    """Load the latest checkpoint into ``accelerator`` and return its step (None: start fresh).

    This job's own checkpoints come first (a restarted attempt continues where it stopped);
    without any, the job's initial checkpoint (see :func:`init_checkpoint`) is loaded.
    """
    latest = latest_checkpoint() or init_checkpoint()
    if latest is None:
        return None
    accelerator.load_state(latest["path"])
    return int(latest["step"])
