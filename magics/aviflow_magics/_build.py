"""From parsed options and the cell to a validated TrainJob, purely (no I/O).

>>> from aviflow_magics._options import parse_train_options
>>> job = build_job(parse_train_options("--nodes 2 --name demo"), "print('hi')\\n")
>>> (job.metadata.name, job.spec.nodes, job.spec.script)
('demo', 2, "print('hi')\\n")
"""

from __future__ import annotations

import hashlib
from typing import Any

from aviflow._flags import apply
from aviflow.spec import API_VERSION, KIND, TrainJob
from aviflow_magics._options import OptionError, TrainOptions

DEFAULT_NAME = "notebook"
# Keys of ``spec`` the cell replaces: the cell body *is* the script.
_ENTRYPOINT_KEYS = ("script", "scriptFile", "command")


def check_syntax(source: str) -> None:
    """Refuse a cell that is not valid Python, naming the line (counted in the cell,
    where line 1 is the ``%%aviflow_train`` line)."""
    if not source.strip():
        raise OptionError("the cell is empty; its body is the training script run on every rank")
    try:
        compile(source, "train.py", "exec", dont_inherit=True)
    except SyntaxError as exc:
        line = exc.lineno or 0
        text = (exc.text or "").strip()
        where = f"line {line + 1} of the cell (train.py line {line})"
        shown = f": {text!r}" if text else ""
        raise OptionError(f"SyntaxError at {where}: {exc.msg}{shown}") from None


def cell_hash(source: str) -> str:
    """The content hash recorded with the job's origin."""
    return "sha256:" + hashlib.sha256(source.encode()).hexdigest()


def build_job(
    options: TrainOptions,
    source: str,
    base: dict[str, Any] | None = None,
    default_name: str = DEFAULT_NAME,
) -> TrainJob:
    """The TrainJob the cell asks for: ``base`` (a ``--spec`` file's mapping) overridden by
    the flags, with the cell as the script. Raises :class:`~aviflow.errors.SpecError`."""
    data: dict[str, Any] = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {}, "spec": {}}
    if base is not None:
        data.update({k: v for k, v in base.items() if k not in ("metadata", "spec")})
        data["metadata"] = dict(base.get("metadata") or {})
        data["spec"] = dict(base.get("spec") or {})
    for key in _ENTRYPOINT_KEYS:
        data["spec"].pop(key, None)
    data["spec"]["script"] = source
    data = apply(data, options.spec_values)
    data["metadata"].setdefault("name", default_name)
    return TrainJob.from_dict(data)


def gpu_hours_requested(job: TrainJob) -> float | None:
    """nodes x gpusPerNode x timeLimit, in GPU-hours (None without a time limit)."""
    seconds = job.spec.time_limit_seconds
    return None if seconds is None else job.spec.total_gpus * seconds / 3600
