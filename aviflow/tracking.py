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
import sys
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow import throughput
from aviflow.records import CheckpointRef, MetricRow
from aviflow.runtime.env import RuntimeEnv, process_rank
from aviflow.store import CHECKPOINT_MARKER, RunDir, RunStore, atomic_write, disk_full, out_of_space

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
    now = time.time()
    numbers = {str(k): _number(v) for k, v in values.items()}
    row = MetricRow(step=step, time=now, attempt=node.attempt, values=_derived(numbers, step, now))
    run = RunDir(node.run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    _HELD.write(run, row)


class _Throughput:
    """What :mod:`aviflow.throughput` needs across rows, in the main process."""

    def __init__(self) -> None:
        self.rates = throughput.Rates()
        self.flops_per_token: float | None = None
        self.peak: float | None = None
        self.looked = False

    def device_peak(self) -> float | None:
        """The peak FLOP/s of the devices this job runs on (looked up once; torch only if
        the job imported it, CUDA only if it has a GPU): None on CPU."""
        if not self.looked:
            self.looked = True
            torch = sys.modules.get("torch")
            try:
                if torch is not None and torch.cuda.is_available():
                    self.peak = throughput.peak_flops(torch.cuda.get_device_name())
            except Exception:  # no driver after all: no MFU
                self.peak = None
        return self.peak


_RATES = _Throughput()


def set_flops_per_token(value: object) -> None:
    """The model's training FLOPs per token, for ``mfu`` (the tracker's config passes it)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        _RATES.flops_per_token = float(value)


def _derived(values: dict[str, Any], step: int, now: float) -> dict[str, Any]:
    """``values`` plus the rates of a row with a ``tokens`` counter (the job's own keys win)."""
    set_flops_per_token(values.get("flops_per_token"))
    tokens = values.get("tokens")
    if isinstance(tokens, bool) or not isinstance(tokens, int | float):
        return values
    rates: dict[str, Any] = _RATES.rates.update(step, now, float(tokens))
    peak, fpt = _RATES.device_peak(), _RATES.flops_per_token
    if "tokens_per_s" in rates and peak is not None and fpt is not None:
        world = os.environ.get("WORLD_SIZE", "1")
        devices = int(world) if world.isdigit() else 1
        found = throughput.mfu(rates["tokens_per_s"], fpt, peak, max(1, devices))
        if found is not None:
            rates["mfu"] = found
    return {**values, **{k: v for k, v in rates.items() if k not in values}}


MAX_HELD_ROWS = 100_000


class _HeldRows:
    """Metric rows a full run store could not take, held in this process in order and
    written, before the next row, once it takes bytes again: a store full for a while costs
    no rows and stops no training. Beyond :data:`MAX_HELD_ROWS` the oldest go (counted)."""

    def __init__(self) -> None:
        self.rows: deque[tuple[RunDir, MetricRow]] = deque()
        self.dropped = 0

    def write(self, run: RunDir, row: MetricRow) -> None:
        self.rows.append((run, row))
        self.flush()
        while len(self.rows) > MAX_HELD_ROWS:
            self.rows.popleft()
            self.dropped += 1

    def flush(self) -> bool:
        """Write what is held; False when the store is still full (the rest stays held)."""
        while self.rows:
            run, row = self.rows[0]
            try:
                run.append_metric(row)
            except OSError as exc:
                if not disk_full(exc):
                    raise
                return False
            self.rows.popleft()
        return True


_HELD = _HeldRows()


def flush() -> bool:
    """Write the metric rows held while the run store was full (the tracker's ``finish``
    calls it); False when some are still held."""
    return _HELD.flush()


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
) -> Path | None:
    """``accelerator.save_state`` into this job's checkpoint for ``step``; keeps the last K
    (``spec.checkpoints.keepLast``). Returns the checkpoint's directory.

    Call it on every process. The directory only counts as a checkpoint once every
    process has written its part and the main process has added the marker file.
    ``save(directory)``, called on every process, writes the state instead of
    ``save_state`` (e.g. a torch Distributed Checkpoint of a sharded model, each rank its
    shard: :mod:`aviflow.examples.llm`).

    On a full run store (no space left, or over quota) the checkpoint is skipped: what was
    written of it is removed, the previous checkpoint stays the latest, the main process's
    log says so and it returns None (every process does, when one could not write its
    part); the training goes on, and the next checkpoint is tried as usual.
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
    full = False
    try:
        if save is None:
            accelerator.save_state(str(staging))
        else:
            save(staging)
    except Exception as exc:  # torch.save and safetensors wrap the OS error
        if not out_of_space(exc, run.checkpoints_dir):
            raise
        full = True
    accelerator.wait_for_everyone()
    full = _any_process(accelerator, full)  # one rank's part missing: no checkpoint
    if accelerator.is_main_process and not full:
        try:
            shutil.rmtree(final, ignore_errors=True)
            os.replace(staging, final)
            marker = {"step": step, "time": time.time(), "attempt": node.attempt}
            atomic_write(final / CHECKPOINT_MARKER, json.dumps(marker))
        except OSError as exc:
            if not out_of_space(exc, run.checkpoints_dir):
                raise
            full = True
    if full:
        if accelerator.is_main_process:
            shutil.rmtree(staging, ignore_errors=True)
            if not (final / CHECKPOINT_MARKER).is_file():
                shutil.rmtree(final, ignore_errors=True)
            accelerator.print(
                f"aviflow: checkpoint {step} not saved: the run store is full; training goes on"
            )
        accelerator.wait_for_everyone()
        return None
    if accelerator.is_main_process:
        complete = run.checkpoints()
        for old in complete[: max(0, len(complete) - node.keep_last)]:
            shutil.rmtree(run.checkpoint_dir(old.step), ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def _any_process(accelerator: Accelerator, flag: bool) -> bool:
    """Whether ``flag`` is true on any process (a collective: every process calls it)."""
    if accelerator.num_processes == 1:
        return flag
    import torch

    count = torch.tensor([1 if flag else 0], device=accelerator.device)
    return bool(accelerator.reduce(count, reduction="sum").item())


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
