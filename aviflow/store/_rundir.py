"""One job's directory: every path in it, and typed reads and writes of its records.

Everything in a job's directory may have been written by the job's code, so every read here
goes through :mod:`._files` (no symlink at any component, regular files only, bounded) and
every record a job writes is parsed with its types enforced (:mod:`._data`); writes follow no
symlink either.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aviflow.errors import JobNotFound, UnsafeJobFile
from aviflow.paging import Batch, wire_bytes
from aviflow.records import (
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobStatus,
    LogChunk,
    MetricRow,
)
from aviflow.store._data import checkpoint_name, failure_record, metric_row, scan_checkpoints
from aviflow.store._files import (
    append_line,
    append_lines,
    atomic_write,
    is_file,
    list_names,
    open_beneath,
    pread_all,
    read_bytes,
    read_json,
    read_records,
    remove_temporaries,
)
from aviflow.store._logs import MAX_LOG_READ, Rotation, cap_log, read_log

if TYPE_CHECKING:  # the spec (pydantic) is imported only where a spec is read or written,
    from aviflow.spec import TrainJob  # so every rank's wrapper starts fast

T = TypeVar("T")
log = logging.getLogger("aviflow.store")
CODE_DIR = "code"
DATA_DIR = "data"
DATA_DIRS = ("logs", "failures", "heartbeats", "checkpoints", "stacks")
RUNTIME_SPEC = ".aviflow-job.yaml"  # the spec's copy in code/, for the job's own runtime
MANIFEST = "MANIFEST.json"
VARS_FILE = "vars.pkl"
MAX_SPEC_BYTES = 4 << 20  # job.yaml and meta.json (env and origin included)
MAX_STACK_BYTES = 1 << 20
_CACHE_SIZE = 4096
# A job's spec and meta are written once: parsed ones are kept per file (path, mtime, size).
_parsed_cache: dict[tuple[str, int, int], Any] = {}


def _cached(path: Path, beneath: Path, parse: Callable[[bytes], T]) -> T:
    with open_beneath(path, beneath) as fd:
        st = os.fstat(fd)
        key = (str(path), st.st_mtime_ns, st.st_size)
        found = _parsed_cache.get(key)
        if found is None:
            if st.st_size > MAX_SPEC_BYTES:
                raise UnsafeJobFile(f"{path.name} is {st.st_size} bytes, over {MAX_SPEC_BYTES}")
            found = parse(pread_all(fd, 0, st.st_size))
            if len(_parsed_cache) >= _CACHE_SIZE:
                _parsed_cache.pop(next(iter(_parsed_cache)))
            _parsed_cache[key] = found
    return found


def _event(obj: dict[str, Any]) -> Event | None:
    try:
        return Event.from_dict(obj)
    except (KeyError, TypeError, ValueError):
        return None  # a record we cannot read is skipped, not fatal to the reader


class RunDir:
    """Every path of one job's directory, and typed reads and writes of its records.

    The directory has three parts. The **control** part, at its top (``job.yaml``,
    ``meta.json``, ``events.jsonl``, ``status.json``, the submission token, the controller's
    binding, declared hangs, the local supervisor's files), is written only by the platform
    (aviflow-api, the controller, the local supervisor) and never mounted into a job's pod. ``code/`` is the
    code snapshot, with the runtime's copy of the spec (``code/.aviflow-job.yaml``), mounted
    read-only. ``data/`` is what the job writes (metrics, logs, failures, heartbeats, stacks,
    checkpoints), its pods' only writable mount of the run store. A job directory made before
    this split has no ``data/``: its data lives at its top, as it did.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.id = self.path.name
        self._data: Path | None = None

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # -- paths -----------------------------------------------------------------------------------
    @property
    def store_root(self) -> Path:
        """The root of the run store this directory sits in (``<root>/<user>/<job>``)."""
        return self.path.parent.parent

    @property
    def spec_path(self) -> Path:
        return self.path / "job.yaml"

    @property
    def meta_path(self) -> Path:
        return self.path / "meta.json"

    @property
    def status_path(self) -> Path:
        return self.path / "status.json"

    @property
    def submission_path(self) -> Path:
        """The token the job's driver binds the directory by (control part; written with
        the directory, see :meth:`~aviflow.store.RunStore.create`)."""
        return self.path / "submission.json"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def code_dir(self) -> Path:
        return self.path / CODE_DIR

    @property
    def runtime_spec_path(self) -> Path:
        """The spec as the job's runtime reads it, in the read-only code snapshot."""
        return self.code_dir / RUNTIME_SPEC

    @property
    def manifest_path(self) -> Path:
        return self.code_dir / MANIFEST

    @property
    def vars_path(self) -> Path:
        return self.code_dir / VARS_FILE

    @property
    def data_dir(self) -> Path:
        """The part the job writes (``data/``; the directory itself in a job made before the
        split)."""
        if self._data is None:
            data = self.path / DATA_DIR
            try:
                is_data = stat.S_ISDIR(os.lstat(data).st_mode)
            except OSError:
                is_data = False
            if not is_data:
                return self.path  # not cached: a directory being made gets its data/ later
            self._data = data
        return self._data

    @property
    def metrics_path(self) -> Path:
        return self.data_dir / "metrics.jsonl"

    @property
    def logs_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def failures_dir(self) -> Path:
        return self.data_dir / "failures"

    @property
    def heartbeats_dir(self) -> Path:
        return self.data_dir / "heartbeats"

    @property
    def checkpoints_dir(self) -> Path:
        return self.data_dir / "checkpoints"

    @property
    def work_dir(self) -> Path:
        """The ranks' working directory: files a script writes by relative name land here."""
        return self.data_dir / "work"

    @property
    def stacks_dir(self) -> Path:
        return self.data_dir / "stacks"

    @property
    def supervisor_lock(self) -> Path:
        return self.path / "supervisor.lock"

    @property
    def supervisor_info(self) -> Path:
        return self.path / "supervisor.json"

    @property
    def supervisor_log(self) -> Path:
        return self.path / "supervisor.log"

    @property
    def processes_path(self) -> Path:
        return self.path / "processes.json"

    @property
    def cancel_request(self) -> Path:
        return self.path / "cancel-requested"

    def cancel_reason(self) -> str | None:
        """Who asked for the cancel (``cancelled by alice``), None when nobody has: the
        request's first 4 KiB, read without following a symlink."""
        try:
            raw = read_bytes(self.cancel_request, self.path, limit=4096)
        except FileNotFoundError:
            return None
        except UnsafeJobFile:
            return "cancelled"
        return raw.decode("utf-8", "replace").strip()

    def rank_log(self, rank: int) -> Path:
        return self.logs_dir / f"rank-{int(rank)}.log"

    def rank_log_previous(self, rank: int) -> Path:
        """What the last rotation of rank ``rank``'s log kept (not served: see
        :mod:`aviflow.store._logs`)."""
        return self.logs_dir / f"rank-{int(rank)}.log.1"

    def node_log(self, node: int) -> Path:
        return self.logs_dir / f"node-{int(node)}.log"

    def node_log_previous(self, node: int) -> Path:
        """What the last rotation of node ``node``'s launcher log kept."""
        return self.logs_dir / f"node-{int(node)}.log.1"

    def failure_path(self, attempt: int, rank: int) -> Path:
        return self.failures_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.json"

    def heartbeat_path(self, node: int) -> Path:
        return self.heartbeats_dir / f"node-{int(node)}.json"

    def rank_heartbeat_path(self, attempt: int, rank: int) -> Path:
        return self.heartbeats_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.json"

    def usage_path(self, attempt: int, rank: int) -> Path:
        """A rank's latest use sample (:mod:`aviflow.usage`), refreshed by its sampler."""
        return self.heartbeats_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.usage.json"

    def stack_path(self, attempt: int, rank: int) -> Path:
        return self.stacks_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.txt"

    def stack_request_path(self, attempt: int) -> Path:
        """Its presence asks every rank of ``attempt`` to write its Python stacks."""
        return self.stacks_dir / f"attempt-{int(attempt)}.requested"

    def hang_path(self, attempt: int) -> Path:
        """The failure the driver declared for ``attempt``: a hang, or pods that cannot start
        (a FailureInfo; control part)."""
        return self.path / "hangs" / f"attempt-{int(attempt)}.json"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / checkpoint_name(step)

    def checkpoint_staging(self, step: int) -> Path:
        """Where a checkpoint is written before it becomes complete."""
        return self.checkpoints_dir / f".{checkpoint_name(step)}.partial"

    # -- records ---------------------------------------------------------------------------------
    # Every read below opens its file beneath self.path with no symlink followed; every write
    # replaces or appends without following one.
    def read_json(self, path: Path, default: Any = None) -> Any:
        """The JSON record at ``path`` (in this directory), or ``default`` when it is
        missing, refused (a symlink, not a regular file, over 1 MiB) or not JSON."""
        return read_json(path, default, beneath=self.path)

    def write_json(self, path: Path, data: Any, indent: int | None = None) -> None:
        atomic_write(path, json.dumps(data, indent=indent), beneath=self.path)

    def spec(self) -> TrainJob:
        from aviflow.spec import TrainJob

        try:
            return _cached(self.spec_path, self.path, lambda raw: TrainJob.from_yaml(raw.decode()))
        except FileNotFoundError:
            raise JobNotFound(f"job {self.id!r} has no job.yaml in {self.path}") from None

    def runtime_spec(self) -> TrainJob:
        """The spec as the job's own runtime reads it: the copy in the read-only code snapshot
        (a pod has no control part to read), or ``job.yaml`` in a job made before the split.
        Platform code reads :meth:`spec`."""
        from aviflow.spec import TrainJob

        for path in (self.runtime_spec_path, self.spec_path):
            try:
                return _cached(path, self.path, lambda raw: TrainJob.from_yaml(raw.decode()))
            except FileNotFoundError:
                continue
        raise JobNotFound(f"job {self.id!r} has no spec in {self.code_dir}")

    def has_runtime_spec(self) -> bool:
        return is_file(self.runtime_spec_path, self.path) or is_file(self.spec_path, self.path)

    def meta(self) -> JobMeta:
        def parse(raw: bytes) -> JobMeta:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            return JobMeta.from_dict(data)

        try:
            return _cached(self.meta_path, self.path, parse)
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            raise JobNotFound(f"job {self.id!r} has no readable meta.json in {self.path}") from None

    def submission_token(self) -> str | None:
        """The submission token the directory was created with (None: made without one)."""
        data = self.read_json(self.submission_path, None)
        token = data.get("token") if isinstance(data, dict) else None
        return token if isinstance(token, str) and token else None

    def status(self) -> JobStatus:
        data = self.read_json(self.status_path, {})
        try:
            return JobStatus.from_dict(data if isinstance(data, dict) else {})
        except (KeyError, TypeError, ValueError):
            return JobStatus.from_dict({})

    def write_status(self, status: JobStatus) -> None:
        self.write_json(self.status_path, status.to_dict(), indent=2)

    def append_event(self, event: Event) -> None:
        append_line(self.events_path, event.to_dict(), beneath=self.path)

    def append_events(self, events: list[Event]) -> None:
        """Append ``events`` in one write: all of them or, on a full disk, none (events
        that belong together, such as RESTARTING and QUEUED, never land one without the
        other)."""
        append_lines(self.events_path, [e.to_dict() for e in events], beneath=self.path)

    def record(self, events: list[Event], status: JobStatus) -> None:
        """Append ``events`` (in one write), then rewrite the status they lead to (events
        first: a reader that sees the new status finds its events)."""
        self.append_events(events)
        self.write_status(status)

    def events(
        self, since: int = 0, *, rows: int | None = None, budget: int | None = None
    ) -> Batch[Event]:
        """One page of events from byte ``since`` on (see :meth:`metrics`)."""
        return self._records(self.events_path, since, _event, rows, budget)

    def metrics(
        self,
        since: int = 0,
        *,
        after_step: int | None = None,
        rows: int | None = None,
        budget: int | None = None,
    ) -> Batch[MetricRow]:
        """One page of metric rows from byte ``since`` on (only steps past ``after_step``),
        each with its types enforced: a row with a step, time or attempt of the wrong type is
        skipped. A page holds at most ``rows`` records and ``budget`` bytes of them as JSON
        (:func:`~aviflow.paging.wire_bytes`), read from at most 8 MiB of the file; its
        ``more`` says to read again from its ``next`` (:func:`~aviflow.paging.read_pages`)."""

        def parse(obj: dict[str, Any]) -> MetricRow | None:
            row = metric_row(obj)
            keep = row is not None and (after_step is None or row.step > after_step)
            return row if keep else None

        return self._records(self.metrics_path, since, parse, rows, budget)

    def _records(
        self,
        path: Path,
        since: int,
        parse: Callable[[dict[str, Any]], T | None],
        rows: int | None,
        budget: int | None,
    ) -> Batch[T]:
        weigh = wire_bytes if budget is not None else None
        try:
            return read_records(
                path, parse, since, beneath=self.path, rows=rows, budget=budget, weigh=weigh
            )
        except UnsafeJobFile as exc:
            log.warning("job %s: %s", self.id, exc)
            return Batch([], max(int(since), 0))

    def append_metric(self, row: MetricRow) -> None:
        append_line(self.metrics_path, row.to_dict(), beneath=self.path)

    def ranks(self, world: int | None = None) -> list[int]:
        """Ranks that have a log (below ``world`` when given: a job cannot invent ranks)."""
        found = []
        for name in list_names(self.logs_dir, self.path):
            stem, _, rest = name.partition("-")
            number = rest.removesuffix(".log")
            if not (stem == "rank" and rest.endswith(".log") and number.isdigit()):
                continue
            if len(number) < 8 and (world is None or int(number) < world):
                found.append(int(number))
        return sorted(found)

    def log(
        self,
        rank: int,
        *,
        tail: int | None = None,
        offset: int | None = None,
        limit: int = MAX_LOG_READ,
    ) -> LogChunk:
        """Rank ``rank``'s log: its last ``tail`` lines, or what follows byte ``offset`` (at
        most ``limit`` bytes, ending on a whole character), or the whole file (at most
        ``limit`` bytes, from its end). Offsets count from the log's first byte before any
        rotation: an offset into what was rotated away reads on from the live file's start
        (see :mod:`aviflow.store._logs`). A log that is a symlink or not a regular file raises
        :class:`~aviflow.errors.UnsafeJobFile`."""
        return read_log(
            self.rank_log(rank), rank, beneath=self.path, tail=tail, offset=offset, limit=limit
        )

    def cap_rank_log(self, rank: int, cap: int, *, final: bool = False) -> Rotation | None:
        """Hold rank ``rank``'s log and its ``.1`` within ``cap`` bytes together (see
        :func:`aviflow.store._logs.cap_log`); what a rotation did, or None."""
        return cap_log(
            self.rank_log(rank), self.rank_log_previous(rank), cap, beneath=self.path, final=final
        )

    def cap_node_log(self, node: int, cap: int, *, final: bool = False) -> Rotation | None:
        """Hold node ``node``'s launcher log (``accelerate launch``'s own output) and its
        ``.1`` within ``cap`` bytes together, as :meth:`cap_rank_log` does a rank's."""
        return cap_log(
            self.node_log(node), self.node_log_previous(node), cap, beneath=self.path, final=final
        )

    def remove_rotation_leftovers(
        self, rank: int | None = None, *, node: int | None = None
    ) -> None:
        """Remove the temporary copies a rotation of rank ``rank``'s log (or node ``node``'s)
        left when it was killed mid-copy (its launcher ended by SIGKILL)."""
        if rank is not None:
            remove_temporaries(self.rank_log_previous(rank), beneath=self.path)
        if node is not None:
            remove_temporaries(self.node_log_previous(node), beneath=self.path)

    def log_tail(self, rank: int, lines: int) -> str:
        """The last ``lines`` lines of rank ``rank``'s log; empty when it has none, or when the
        job made it a symlink or a special file."""
        try:
            return self.log(rank, tail=lines).text
        except UnsafeJobFile as exc:
            log.warning("job %s: %s", self.id, exc)
            return ""

    def failures(self, attempt: int | None = None) -> list[FailureInfo]:
        """Failure records of ranks that raised (of one attempt, or all), earliest first."""
        prefix = f"attempt-{int(attempt)}-" if attempt is not None else "attempt-"
        names = sorted(list_names(self.failures_dir, self.path))
        rows = [
            self.read_json(self.failures_dir / n)
            for n in names
            if n.startswith(prefix) and n.endswith(".json")
        ]
        records = [f for r in rows if isinstance(r, dict) and (f := failure_record(r))]
        return sorted(records, key=lambda r: (r.time or 0.0, r.rank or 0))

    def write_failure(self, record: FailureInfo) -> None:
        assert record.rank is not None
        self.write_json(self.failure_path(record.attempt, record.rank), record.to_dict(), indent=2)

    def checkpoints(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first (markers with wrong types are skipped)."""
        return scan_checkpoints(self.checkpoints_dir, self.id, self.path)

    def heartbeat(self, node: int) -> dict[str, Any]:
        data = self.read_json(self.heartbeat_path(node), {})
        return data if isinstance(data, dict) else {}

    def write_heartbeat(self, node: int, beat: dict[str, Any]) -> None:
        self.write_json(self.heartbeat_path(node), beat)

    def rank_beats(self, attempt: int, world: int) -> dict[int, float]:
        """When each rank of ``attempt`` last beat (ranks that never did are left out)."""
        out = {}
        for rank in range(world):
            beat = self.read_json(self.rank_heartbeat_path(attempt, rank), None)
            when = beat.get("time") if isinstance(beat, dict) else None
            if isinstance(when, int | float) and not isinstance(when, bool):
                out[rank] = float(when)
        return out

    def stacks(self, attempt: int, world: int) -> dict[int, str]:
        """The Python stacks ranks of ``attempt`` wrote (on request or by their watchdog): the
        last :data:`MAX_STACK_BYTES` of each rank's file, where its latest dump is."""
        out = {}
        for rank in range(world):
            try:
                with open_beneath(self.stack_path(attempt, rank), self.path) as fd:
                    size = os.fstat(fd).st_size
                    start = max(0, size - MAX_STACK_BYTES)
                    raw = pread_all(fd, start, MAX_STACK_BYTES)
            except (OSError, ValueError):
                continue
            text = raw.decode("utf-8", "replace")
            if text.strip():
                out[rank] = text
        return out

    def stacks_requested(self, attempt: int) -> float | None:
        """When the driver asked the ranks of ``attempt`` for their stacks (None: not yet)."""
        try:
            raw = read_bytes(self.stack_request_path(attempt), self.path, 64)
            return float(raw.decode().strip())
        except (OSError, ValueError):
            return None

    def request_stacks(self, attempt: int, now: float) -> None:
        """Ask every rank of ``attempt`` to write its Python stacks (a file in ``data/``,
        replaced without following whatever the job left there)."""
        try:
            self.stacks_dir.mkdir(parents=True, exist_ok=True)
            self.write_json(self.stack_request_path(attempt), now)
        except (OSError, ValueError) as exc:  # the job made stacks/ a symlink or a file
            log.warning("job %s: cannot ask for stacks: %s", self.id, str(exc)[:300])

    def hang(self, attempt: int) -> FailureInfo | None:
        """The failure (a hang, pods that cannot start) the driver declared for ``attempt``."""
        data = self.read_json(self.hang_path(attempt), None)
        try:
            return FailureInfo.from_dict(data) if isinstance(data, dict) else None
        except (KeyError, TypeError, ValueError):
            return None

    def write_hang(self, record: FailureInfo) -> None:
        self.hang_path(record.attempt).parent.mkdir(parents=True, exist_ok=True)
        self.write_json(self.hang_path(record.attempt), record.to_dict())
