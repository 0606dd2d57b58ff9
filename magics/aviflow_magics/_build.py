"""From parsed options and the cell to a validated TrainJob, purely (no I/O).

>>> from aviflow_magics._options import parse_train_options
>>> job = build_job(parse_train_options("--nodes 2 --name demo"), "print('hi')\\n")
>>> (job.metadata.name, job.spec.nodes, job.spec.script)
('demo', 2, "print('hi')\\n")
"""

from __future__ import annotations

import hashlib
from typing import Any

from aviflow.spec import API_VERSION, KIND, AccelerateSpec, FsdpSpec, TrainJob, TrainJobSpec
from aviflow_magics._options import (
    ACCELERATE_FIELDS,
    FSDP_FIELDS,
    SPEC_FIELDS,
    OptionError,
    TrainOptions,
)

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
    spec = data["spec"]
    for key in _ENTRYPOINT_KEYS:
        spec.pop(key, None)
    spec["script"] = source
    if options.name is not None:
        data["metadata"]["name"] = options.name
    data["metadata"].setdefault("name", default_name)
    for name in SPEC_FIELDS:
        value = getattr(options, name)
        if value is not None:
            spec[spec_key(TrainJobSpec, name)] = value
    if options.env:
        spec["env"] = {**(spec.get("env") or {}), **options.env}
    if options.secrets:
        spec["secrets"] = list(dict.fromkeys([*(spec.get("secrets") or []), *options.secrets]))
    accel_flags = {
        spec_key(AccelerateSpec, field): getattr(options, option)
        for option, field in ACCELERATE_FIELDS.items()
        if getattr(options, option) is not None
    }
    fsdp_flags = {
        spec_key(FsdpSpec, field): getattr(options, option)
        for option, field in FSDP_FIELDS.items()
        if getattr(options, option) is not None
    }
    if accel_flags or fsdp_flags:
        key = spec_key(TrainJobSpec, "accelerate")
        accelerate = {**(spec.get(key) or {}), **accel_flags}
        if fsdp_flags:
            fsdp_key = spec_key(AccelerateSpec, "fsdp")
            accelerate[fsdp_key] = {**(accelerate.get(fsdp_key) or {}), **fsdp_flags}
        spec[key] = accelerate
    return TrainJob.from_dict(data)


def spec_key(model: Any, field: str) -> str:
    """The YAML key of ``model``'s field ``field`` (its alias)."""
    info = model.model_fields[field]
    return str(info.alias or field)


def gpu_hours_requested(job: TrainJob) -> float | None:
    """nodes x gpusPerNode x timeLimit, in GPU-hours (None without a time limit)."""
    seconds = job.spec.time_limit_seconds
    return None if seconds is None else job.spec.total_gpus * seconds / 3600
