"""What a job writes into its directory, read as the hostile input it is.

Checkpoint markers, metric rows and failure records are parsed with their types enforced (a
``step`` that is a string, a bool or a float, an ``attempt`` that is markup, a ``time`` that
is not a number: the record is skipped and logged, never passed on); every open goes through
:mod:`._files` (no symlink, regular files only). Logs are in :mod:`._logs`.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeGuard

from aviflow.records import CheckpointRef, FailureInfo, MetricRow
from aviflow.store._files import MAX_RECORD_BYTES, is_dir, list_names, read_bytes
from aviflow.wire import WireError, from_wire

log = logging.getLogger("aviflow.store")
CHECKPOINT_MARKER = "aviflow-checkpoint.json"
CHECKPOINT_PREFIX = "step-"
MAX_METRIC_KEYS = 256
MAX_METRIC_KEY = 200  # characters of a metric's name
MAX_METRIC_TEXT = 1000  # characters of a metric whose value is text
MAX_EXCEPTION = 256  # characters of an exception's class name in a failure record
MAX_MESSAGE = 4000  # characters of its message (the start is kept)
MAX_TRACEBACK = 32_000  # characters of its traceback (the end is kept)


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{int(step):09d}"


def _whole(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def checkpoint_ref(marker: Any, job_id: str) -> CheckpointRef | None:
    """The checkpoint a marker describes, or None when a field has the wrong type: ``step``
    a whole number >= 0, ``attempt`` a whole number >= 1 or absent, ``time`` a number or
    absent."""
    if not isinstance(marker, dict):
        return None
    step, attempt, when = marker.get("step"), marker.get("attempt"), marker.get("time")
    if not _whole(step) or step < 0:
        return None
    if attempt is not None and (not _whole(attempt) or attempt < 1):
        return None
    if when is not None and not _number(when):
        return None
    return CheckpointRef(job_id, step, time=None if when is None else float(when), attempt=attempt)


def scan_checkpoints(
    directory: Path, job_id: str, beneath: Path | None = None
) -> list[CheckpointRef]:
    """Complete checkpoints (sub-directories ``step-N`` with a valid marker file) in
    ``directory``, oldest first. ``beneath``: the job's directory (``directory``'s parent when
    not given); a symlinked directory or marker is not a checkpoint, a marker with the wrong
    types is skipped and logged."""
    top = beneath or Path(directory).parent
    found = []
    for name in list_names(directory, top):
        if not name.startswith(CHECKPOINT_PREFIX) or not is_dir(Path(directory) / name, top):
            continue
        marker_path = Path(directory) / name / CHECKPOINT_MARKER
        try:
            marker = json.loads(read_bytes(marker_path, top, MAX_RECORD_BYTES))
        except FileNotFoundError:
            continue  # still being written
        except (OSError, ValueError, RecursionError) as exc:
            log.warning("job %s: checkpoint %s skipped: %s", job_id, name[:80], str(exc)[:300])
            continue
        ref = checkpoint_ref(marker, job_id)
        if ref is None:
            log.warning(
                "job %s: checkpoint %s skipped: its marker's fields have wrong types",
                job_id,
                name[:80],
            )
            continue
        found.append(ref)
    return sorted(found)


def metric_row(obj: dict[str, Any]) -> MetricRow | None:
    """A row of ``metrics.jsonl`` with its types enforced (``step`` and ``attempt`` whole
    numbers, ``time`` a number; ``values`` a map of names of at most 200 characters to finite
    numbers or short text; other values are dropped), or None."""
    step, when, attempt = obj.get("step"), obj.get("time"), obj.get("attempt", 1)
    values = obj.get("values")
    if not (_whole(step) and _number(when) and _whole(attempt) and attempt >= 1):
        return None
    if not isinstance(values, dict):
        return None
    kept: dict[str, Any] = {}
    for key, value in values.items():
        if len(kept) >= MAX_METRIC_KEYS or not isinstance(key, str) or len(key) > MAX_METRIC_KEY:
            continue
        if _number(value) or (isinstance(value, str) and len(value) <= MAX_METRIC_TEXT):
            kept[key] = value
    return MetricRow(step=step, time=float(when), attempt=attempt, values=kept)


def failure_record(obj: dict[str, Any]) -> FailureInfo | None:
    """A rank's failure record (``failures/attempt-A-rank-R.json``) with its types enforced
    and its text bounded (it is copied into the job's status, the TrainJob's and the
    ledger): ``rank``, ``node``, ``attempt``, ``exitCode``, ``pid`` whole numbers, ``time`` a
    number, the texts strings; the message's start and the traceback's end are kept. None
    when a field has the wrong type."""
    try:
        found = from_wire(FailureInfo, obj, strict=True)  # the keys before 0.2 included
    except WireError:
        return None
    if len(found.exception) > MAX_EXCEPTION:
        return None
    return replace(
        found,
        message=found.message[:MAX_MESSAGE],
        traceback=found.traceback[-MAX_TRACEBACK:],
        log_tail=found.log_tail[-MAX_MESSAGE:],
    )
