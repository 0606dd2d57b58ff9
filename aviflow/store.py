"""The run store: one directory per job, written atomically, readable while the job runs.

:class:`RunDir` owns every path inside a job's directory and :class:`RunStore` every path
above it; no other module spells a file name of the store. The layout::

    <root>/<user>/<job-id>/          one user's (or one job's) directory can be mounted alone
        job.yaml                     the validated TrainJob spec
        meta.json                    JobMeta: id, name, user, team, submit time, code hash, origin
        code/                        the code snapshot: MANIFEST.json (sha256 per file, content
                                     hash), the entry point, vars.pkl, accelerate_config.yaml
        events.jsonl                 append-only lifecycle Events (QUEUED, STARTING, RUNNING, ...)
        status.json                  the latest JobStatus, rewritten atomically
        logs/node-<n>.log            each node's launcher output
        logs/rank-<r>.log            each process's output
        failures/attempt-<a>-rank-<r>.json   a FailureInfo, written by a rank that raised
        heartbeats/node-<n>.json     refreshed by each node's runtime
        heartbeats/attempt-<a>-rank-<r>.json   refreshed by each rank's watchdog
        stacks/attempt-<a>-rank-<r>.txt        a rank's Python stacks (hang reports);
                                     attempt-<a>-hang.json the hang the driver declared
        metrics.jsonl                one MetricRow per logged step
        checkpoints/step-<N>/        complete ones carry aviflow-checkpoint.json
        supervisor.{lock,json,log}, processes.json, cancel-requested   (local backend only)
    <root>/.ids/<job-id>             a link to ../<user>/<job-id>: reserves the id store-wide
    <root>/.ids.jsonl                one line per created job, oldest first (listings read its end)

``<user>`` is the owner's name as a DNS-1123 label (:func:`aviflow.names.slugify`). Writers
replace whole files with ``os.replace`` or append whole lines with one ``write``, so readers
never see a torn file; readers skip a line they cannot parse rather than fail. Job ids are
DNS-1123 labels, checked before any path is built from them, so no id points outside the root.

Reads are incremental where files grow: :meth:`RunDir.events` and :meth:`RunDir.metrics`
take a byte-offset cursor and return the cursor to continue from; :meth:`RunDir.log` reads a
tail (from the end) or from an offset.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from aviflow.errors import JobNotFound
from aviflow.names import is_dns1123_label, slugify
from aviflow.records import (
    Batch,
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobStatus,
    LogChunk,
    MetricRow,
    TrainerImage,
)

if TYPE_CHECKING:  # the spec (pydantic) is imported only where a spec is read or written,
    from aviflow.spec import TrainJob  # so every rank's wrapper starts fast

T = TypeVar("T")
ROOT_ENV = "AVIFLOW_ROOT"
CHECKPOINT_MARKER = "aviflow-checkpoint.json"
CHECKPOINT_PREFIX = "step-"
CODE_DIR = "code"
MANIFEST = "MANIFEST.json"
VARS_FILE = "vars.pkl"
INDEX_DIR = ".ids"
INDEX_LOG = ".ids.jsonl"
MAX_LOG_READ = 1 << 20  # bytes one log read returns at most
MAX_TAIL_LINES = 100_000
_CACHE_SIZE = 4096
# A job's spec and meta are written once: parsed ones are kept per file (path, mtime, size).
_parsed_cache: dict[tuple[str, int, int], Any] = {}


def _cached(path: Path, parse: Callable[[bytes], T]) -> T:
    st = os.stat(path)
    key = (str(path), st.st_mtime_ns, st.st_size)
    found = _parsed_cache.get(key)
    if found is None:
        found = parse(path.read_bytes())
        if len(_parsed_cache) >= _CACHE_SIZE:
            _parsed_cache.pop(next(iter(_parsed_cache)))
        _parsed_cache[key] = found
    return found


def default_root() -> Path:
    """``$AVIFLOW_ROOT``, else ``~/.aviflow/runs``."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).expanduser() if env else Path.home() / ".aviflow" / "runs"


def atomic_write(path: Path, data: str | bytes) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new file, whole."""
    raw = data.encode() if isinstance(data, str) else data
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def append_line(path: Path, obj: dict[str, Any]) -> None:
    """Append one JSON line with a single ``write`` on an O_APPEND descriptor."""
    line = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


def read_lines(path: Path, since: int = 0) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON objects of ``path`` from byte ``since`` on, and the offset after the last
    complete line. A line still being written is left for the next read; a line that is not
    a JSON object is skipped."""
    try:
        with open(path, "rb") as f:
            since = min(max(int(since), 0), os.fstat(f.fileno()).st_size)
            f.seek(since)
            data = f.read()
    except FileNotFoundError:
        return [], max(int(since), 0)
    end = data.rfind(b"\n") + 1
    out = []
    for raw in data[:end].split(b"\n"):
        if raw.strip():
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
    return out, since + end


def read_json(path: Path, default: Any = None) -> Any:
    """The JSON in ``path``; ``default`` if it is missing or unreadable."""
    try:
        return json.loads(path.read_bytes())
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return default


def _parsed(rows: list[dict[str, Any]], parse: Callable[[dict[str, Any]], T]) -> list[T]:
    out = []
    for row in rows:
        try:
            out.append(parse(row))
        except (KeyError, TypeError, ValueError):
            continue  # a record we cannot read is skipped, not fatal to the reader
    return out


def checkpoint_name(step: int) -> str:
    return f"{CHECKPOINT_PREFIX}{int(step):09d}"


def scan_checkpoints(directory: Path, job_id: str) -> list[CheckpointRef]:
    """Complete checkpoints (sub-directories with a marker file) in ``directory``, oldest first."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for entry in entries:
        if not entry.name.startswith(CHECKPOINT_PREFIX) or not entry.is_dir():
            continue
        marker = read_json(Path(entry.path) / CHECKPOINT_MARKER)
        if isinstance(marker, dict) and isinstance(marker.get("step"), int):
            found.append(
                CheckpointRef(
                    job_id,
                    marker["step"],
                    time=marker.get("time"),
                    attempt=marker.get("attempt"),
                )
            )
    return sorted(found)


class RunDir:
    """Every path of one job's directory, and typed reads and writes of its records."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.id = self.path.name

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
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def code_dir(self) -> Path:
        return self.path / CODE_DIR

    @property
    def manifest_path(self) -> Path:
        return self.code_dir / MANIFEST

    @property
    def vars_path(self) -> Path:
        return self.code_dir / VARS_FILE

    @property
    def logs_dir(self) -> Path:
        return self.path / "logs"

    @property
    def failures_dir(self) -> Path:
        return self.path / "failures"

    @property
    def heartbeats_dir(self) -> Path:
        return self.path / "heartbeats"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

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

    def rank_log(self, rank: int) -> Path:
        return self.logs_dir / f"rank-{int(rank)}.log"

    def node_log(self, node: int) -> Path:
        return self.logs_dir / f"node-{int(node)}.log"

    def failure_path(self, attempt: int, rank: int) -> Path:
        return self.failures_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.json"

    def heartbeat_path(self, node: int) -> Path:
        return self.heartbeats_dir / f"node-{int(node)}.json"

    def rank_heartbeat_path(self, attempt: int, rank: int) -> Path:
        return self.heartbeats_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.json"

    def stack_path(self, attempt: int, rank: int) -> Path:
        return self.path / "stacks" / f"attempt-{int(attempt)}-rank-{int(rank)}.txt"

    def stack_request_path(self, attempt: int) -> Path:
        """Its presence asks every rank of ``attempt`` to write its Python stacks."""
        return self.path / "stacks" / f"attempt-{int(attempt)}.requested"

    def hang_path(self, attempt: int) -> Path:
        """The hang the driver declared for ``attempt`` (a FailureInfo)."""
        return self.path / "stacks" / f"attempt-{int(attempt)}-hang.json"

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / checkpoint_name(step)

    def checkpoint_staging(self, step: int) -> Path:
        """Where a checkpoint is written before it becomes complete."""
        return self.checkpoints_dir / f".{checkpoint_name(step)}.partial"

    # -- records ---------------------------------------------------------------------------------
    def spec(self) -> TrainJob:
        from aviflow.spec import TrainJob

        try:
            return _cached(self.spec_path, lambda raw: TrainJob.from_yaml(raw.decode()))
        except FileNotFoundError:
            raise JobNotFound(f"job {self.id!r} has no job.yaml in {self.path}") from None

    def meta(self) -> JobMeta:
        def parse(raw: bytes) -> JobMeta:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not an object")
            return JobMeta.from_dict(data)

        try:
            return _cached(self.meta_path, parse)
        except (OSError, ValueError, KeyError, TypeError):
            raise JobNotFound(f"job {self.id!r} has no readable meta.json in {self.path}") from None

    def status(self) -> JobStatus:
        data = read_json(self.status_path, {})
        return JobStatus.from_dict(data if isinstance(data, dict) else {})

    def write_status(self, status: JobStatus) -> None:
        atomic_write(self.status_path, json.dumps(status.to_dict(), indent=2))

    def append_event(self, event: Event) -> None:
        append_line(self.events_path, event.to_dict())

    def record(self, events: list[Event], status: JobStatus) -> None:
        """Append ``events``, then rewrite the status they lead to (events first: a reader that
        sees the new status finds its events)."""
        for event in events:
            self.append_event(event)
        self.write_status(status)

    def events(self, since: int = 0) -> Batch[Event]:
        rows, end = read_lines(self.events_path, since)
        return Batch(_parsed(rows, Event.from_dict), end)

    def metrics(self, since: int = 0) -> Batch[MetricRow]:
        rows, end = read_lines(self.metrics_path, since)
        return Batch(_parsed(rows, MetricRow.from_dict), end)

    def append_metric(self, row: MetricRow) -> None:
        append_line(self.metrics_path, row.to_dict())

    def ranks(self) -> list[int]:
        try:
            names = os.listdir(self.logs_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        found = []
        for name in names:
            stem, _, rest = name.partition("-")
            number = rest.removesuffix(".log")
            if stem == "rank" and rest.endswith(".log") and number.isdigit():
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
        ``limit`` bytes, from its end)."""
        return read_log(self.rank_log(rank), rank, tail=tail, offset=offset, limit=limit)

    def failures(self, attempt: int | None = None) -> list[FailureInfo]:
        """Failure records of ranks that raised (of one attempt, or all), earliest first."""
        try:
            names = sorted(os.listdir(self.failures_dir))
        except (FileNotFoundError, NotADirectoryError):
            return []
        prefix = f"attempt-{int(attempt)}-" if attempt is not None else "attempt-"
        rows = [
            read_json(self.failures_dir / n)
            for n in names
            if n.startswith(prefix) and n.endswith(".json")
        ]
        records = _parsed([r for r in rows if isinstance(r, dict)], FailureInfo.from_dict)
        return sorted(records, key=lambda r: (r.time or 0.0, r.rank or 0))

    def write_failure(self, record: FailureInfo) -> None:
        assert record.rank is not None
        atomic_write(
            self.failure_path(record.attempt, record.rank), json.dumps(record.to_dict(), indent=2)
        )

    def checkpoints(self) -> list[CheckpointRef]:
        """Complete checkpoints, oldest first."""
        return scan_checkpoints(self.checkpoints_dir, self.id)

    def heartbeat(self, node: int) -> dict[str, Any]:
        data = read_json(self.heartbeat_path(node), {})
        return data if isinstance(data, dict) else {}

    def write_heartbeat(self, node: int, beat: dict[str, Any]) -> None:
        atomic_write(self.heartbeat_path(node), json.dumps(beat))

    def rank_beats(self, attempt: int, world: int) -> dict[int, float]:
        """When each rank of ``attempt`` last beat (ranks that never did are left out)."""
        out = {}
        for rank in range(world):
            beat = read_json(self.rank_heartbeat_path(attempt, rank), None)
            if isinstance(beat, dict) and isinstance(beat.get("time"), int | float):
                out[rank] = float(beat["time"])
        return out

    def stacks(self, attempt: int, world: int) -> dict[int, str]:
        """The Python stacks ranks of ``attempt`` wrote (on request or by their watchdog)."""
        out = {}
        for rank in range(world):
            try:
                text = self.stack_path(attempt, rank).read_text(errors="replace")
            except OSError:
                continue
            if text.strip():
                out[rank] = text
        return out

    def hang(self, attempt: int) -> FailureInfo | None:
        """The hang the driver declared for ``attempt``, if it did."""
        data = read_json(self.hang_path(attempt), None)
        return FailureInfo.from_dict(data) if isinstance(data, dict) else None

    def write_hang(self, record: FailureInfo) -> None:
        self.hang_path(record.attempt).parent.mkdir(parents=True, exist_ok=True)
        atomic_write(self.hang_path(record.attempt), json.dumps(record.to_dict()))


def read_log(
    path: Path,
    rank: int,
    *,
    tail: int | None = None,
    offset: int | None = None,
    limit: int = MAX_LOG_READ,
) -> LogChunk:
    """See :meth:`RunDir.log`. Reads cost the bytes returned, not the size of the file."""
    if tail is not None and offset is not None:
        raise ValueError("give tail or offset, not both")
    if tail is not None and not 0 <= tail <= MAX_TAIL_LINES:
        raise ValueError(f"tail must be between 0 and {MAX_TAIL_LINES} lines")
    if offset is not None and offset < 0:
        raise ValueError("offset must be >= 0")
    try:
        f = open(path, "rb")  # noqa: SIM115
    except FileNotFoundError:
        return LogChunk(rank, "", 0, 0, 0)
    with f:
        size = os.fstat(f.fileno()).st_size
        if offset is not None:
            start = min(offset, size)
            f.seek(start)
            data = f.read(min(limit, size - start))
            data = data[: _whole_characters(data)]
            return LogChunk(rank, data.decode("utf-8", "replace"), start, start + len(data), size)
        if tail == 0:
            return LogChunk(rank, "", size, size, size)
        start, data = _tail_bytes(f, size, tail, limit)
        return LogChunk(rank, data.decode("utf-8", "replace"), start, size, size)


def _whole_characters(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


def _tail_bytes(f: Any, size: int, lines: int | None, limit: int) -> tuple[int, bytes]:
    """(start offset, bytes) of the last ``lines`` lines (all when None), at most ``limit``
    bytes, read backwards from the end in blocks."""
    end, buf = size, b""
    while end > 0 and len(buf) <= limit:
        start = max(0, end - 8192)
        f.seek(start)
        buf = f.read(end - start) + buf
        end = start
        if lines is not None and buf.count(b"\n", 0, max(len(buf) - 1, 0)) >= lines:
            break
    begin = end  # the file offset of buf[0]
    if lines is not None:
        body = buf[:-1] if buf.endswith(b"\n") else buf
        cut = len(body)
        for _ in range(lines):
            cut = body.rfind(b"\n", 0, cut)
            if cut < 0:
                break
        if cut >= 0:
            begin, buf = begin + cut + 1, buf[cut + 1 :]
    if len(buf) > limit:
        drop = len(buf) - limit
        newline = buf.find(b"\n", drop)
        if 0 <= newline < len(buf) - 1:
            drop = newline + 1
        begin, buf = begin + drop, buf[drop:]
    return begin, buf


class RunStore:
    """All jobs under one root directory (the layout is in the module docstring)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        self._found: dict[str, Path] = {}
        self._migrated = False

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    @property
    def index_dir(self) -> Path:
        return self.root / INDEX_DIR

    def file(self, name: str) -> Path:
        """A file of the store itself (``queues.json``, ``.queue.lock``)."""
        return self.root / name

    def user_dir(self, user: str) -> Path:
        return self.root / slugify(user)

    @staticmethod
    def check_id(job_id: object) -> str:
        if not isinstance(job_id, str) or not is_dns1123_label(job_id):
            raise JobNotFound(f"{short_id(job_id)} is not a job id (ids look like 'tiny-3f9a1c2b')")
        return job_id

    def locate(self, job_id: str) -> Path | None:
        """The directory of ``job_id`` if it is complete (has its spec), else None."""
        self.check_id(job_id)
        self.migrate_legacy()
        cached = self._found.get(job_id)
        if cached is not None and (cached / "job.yaml").is_file():
            return cached
        link = self.index_dir / job_id
        candidates: list[Path] = []
        try:
            candidates.append(self.root / os.readlink(link).removeprefix("../"))
        except OSError:  # no index here (a mount of one user's or job's directory): search
            try:
                candidates += [Path(e.path) / job_id for e in os.scandir(self.root) if _is_home(e)]
            except OSError:
                return None
        for path in candidates:
            if (path / "job.yaml").is_file() and path.parent.parent == self.root:
                self._found[job_id] = path
                return path
        return None

    def get(self, job_id: str) -> RunDir:
        path = self.locate(job_id)
        if path is None:
            raise JobNotFound(
                f"no job {job_id!r} in {self.root}; `aviflow ls` lists the jobs there"
            )
        return RunDir(path)

    @property
    def index_log(self) -> Path:
        return self.root / INDEX_LOG

    def ids(self, newest: int | None = None) -> list[str]:
        """Job ids, oldest submission first; with ``newest``, only the newest N of them (read
        from the end of the index: the cost does not grow with the number of jobs)."""
        self.migrate_legacy()
        if newest is not None and newest <= 0:
            return []
        if not self.index_log.exists():
            return self._scan_ids(newest)
        found: list[str] = []
        lines = None if newest is None else 2 * newest + 8
        while True:
            rows = list(dict.fromkeys(self._index_rows(lines)))  # each id once, in order
            found = []
            for job_id in reversed(rows):
                if self.locate(job_id) is not None:
                    found.append(job_id)
                    if newest is not None and len(found) >= newest:
                        break
            if newest is None or len(found) >= newest or lines is None or len(rows) < lines:
                return list(reversed(found))
            lines *= 4  # removed jobs at the end of the index: read further back

    def _index_rows(self, lines: int | None) -> list[str]:
        if lines is None:
            rows, _ = read_lines(self.index_log)
        else:
            with open(self.index_log, "rb") as f:
                _, data = _tail_bytes(f, os.fstat(f.fileno()).st_size, lines, 1 << 30)
            rows = []
            for raw in data.splitlines():
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    rows.append(obj)
        return [str(r["id"]) for r in rows if is_dns1123_label(str(r.get("id", "")))]

    def migrate_legacy(self) -> list[str]:
        """Move finished jobs of the flat layout of earlier versions (``<root>/<job-id>/``)
        under their user's directory, into the index; once per store object. A legacy job that
        has not finished is left where it is (its supervisor uses its path)."""
        if self._migrated:
            return []
        self._migrated = True
        moved = []
        try:
            entries = [e for e in os.scandir(self.root) if _is_home(e)]
        except OSError:
            return []
        legacy = []
        for entry in entries:
            old = RunDir(Path(entry.path))
            if not old.spec_path.is_file() or not old.status().state.is_finished():
                continue
            data = read_json(old.meta_path, {})
            if isinstance(data, dict):
                legacy.append((float(data.get("submitted") or 0.0), old, data))
        for _, old, data in sorted(legacy, key=lambda t: (t[0], t[1].id)):
            user = str(data.get("user") or "unknown")
            home = self.user_dir(user)
            home.mkdir(exist_ok=True)
            self.index_dir.mkdir(exist_ok=True)
            try:
                os.symlink(f"../{home.name}/{old.id}", self.index_dir / old.id)
            except FileExistsError:
                continue
            meta = {
                **data,
                "id": old.id,
                "codeHash": data.get("codeHash", data.get("code_hash", "")),
            }
            atomic_write(old.meta_path, json.dumps(meta, indent=2))
            os.rename(old.path, home / old.id)
            append_line(
                self.index_log, {"id": old.id, "user": home.name, "time": meta.get("submitted", 0)}
            )
            moved.append(old.id)
        if moved:
            self._found.clear()
        return moved

    def _scan_ids(self, newest: int | None) -> list[str]:
        """Without an index (one user's directory mounted alone): every job, by submit time."""
        found: list[tuple[float, str]] = []
        try:
            users = [Path(e.path) for e in os.scandir(self.root) if _is_home(e)]
        except OSError:
            return []
        for home in users:
            for entry in os.scandir(home):
                if is_dns1123_label(entry.name) and (Path(entry.path) / "job.yaml").is_file():
                    try:
                        found.append((RunDir(Path(entry.path)).meta().submitted, entry.name))
                    except JobNotFound:
                        continue
        ids = [job_id for _, job_id in sorted(found)]
        return ids if newest is None else ids[-newest:]

    def run_dirs(self) -> Iterator[RunDir]:
        for job_id in self.ids():
            path = self.locate(job_id)
            if path is not None:
                yield RunDir(path)

    def checkpoint_path(self, ref: CheckpointRef) -> Path:
        """Where ``ref`` is in this store (as this reader mounts it)."""
        path = self.get(ref.job_id).checkpoint_dir(ref.step)
        if not (path / CHECKPOINT_MARKER).is_file():
            raise JobNotFound(f"job {ref.job_id!r} has no complete checkpoint at step {ref.step}")
        return path

    def create(
        self,
        job: TrainJob,
        files: dict[str, bytes],
        user: str,
        *,
        team: str | None = None,
        backend: str = "",
        code_hash: str = "",
        origin: dict[str, Any] | None = None,
        job_id: str | None = None,
        image: TrainerImage | None = None,
        owner_ids: tuple[int, int] | None = None,
    ) -> RunDir:
        """Write a new job directory whole, then move it into place under a fresh unique id
        (or ``job_id``, which must be free: a TrainJob created on the cluster by name).
        ``owner_ids``: the uid and gid the job's processes run as, given the directory when
        they are not this process's (pods as uid 1000, a controller as root).

        ``files`` maps paths relative to the job directory to their content. The directory
        only appears under the root when complete; a failure leaves nothing behind.
        """
        self.migrate_legacy()
        home = self.user_dir(user)
        home.mkdir(parents=True, exist_ok=True)
        self.index_dir.mkdir(exist_ok=True)
        staging = Path(os.path.realpath(home)) / f".staging-{secrets.token_hex(8)}"
        staging.mkdir()
        try:
            for rel, content in files.items():
                target = (staging / rel).resolve()
                if staging.resolve() not in target.parents:
                    raise ValueError(f"refusing to write {rel!r} outside the job directory")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            (staging / "job.yaml").write_text(job.to_yaml())
            for sub in ("logs", "failures", "heartbeats", "checkpoints"):
                (staging / sub).mkdir()
            job_id = self._reserve_id(job.slug, home.name, job_id)
            meta = JobMeta(
                id=job_id,
                name=job.metadata.name,
                user=user,
                team=team,
                submitted=time.time(),
                backend=backend,
                code_hash=code_hash,
                origin=dict(origin or {}),
                image=image,
            )
            (staging / "meta.json").write_text(json.dumps(meta.to_dict(), indent=2))
            if owner_ids is not None and owner_ids != (os.geteuid(), os.getegid()):
                _chown_tree(staging, *owner_ids)
            try:
                os.rename(staging, home / job_id)
            except BaseException:
                (self.index_dir / job_id).unlink(missing_ok=True)
                raise
            append_line(self.index_log, {"id": job_id, "user": home.name, "time": meta.submitted})
            self._found[job_id] = home / job_id
            return RunDir(home / job_id)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)

    def _reserve_id(self, slug: str, user_dir: str, wanted: str | None = None) -> str:
        while True:
            job_id = wanted or f"{slug}-{secrets.token_hex(4)}"
            try:
                os.symlink(f"../{user_dir}/{job_id}", self.index_dir / job_id)
                return job_id
            except FileExistsError:
                if wanted is not None:
                    raise FileExistsError(f"job id {wanted!r} is taken in {self.root}") from None
                continue

    def remove(self, job_id: str) -> None:
        """Delete a job's directory and index entry (a submission that did not go through);
        its line in the index log is skipped by readers since the job cannot be located."""
        path = self.locate(job_id)
        (self.index_dir / job_id).unlink(missing_ok=True)
        self._found.pop(job_id, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)


def _chown_tree(top: Path, uid: int, gid: int) -> None:
    os.chown(top, uid, gid)
    for parent, dirs, names in os.walk(top):
        for name in (*dirs, *names):
            os.chown(os.path.join(parent, name), uid, gid, follow_symlinks=False)


def _is_home(entry: os.DirEntry[str]) -> bool:
    """A user's directory (not the index, a staging area or a file)."""
    return is_dns1123_label(entry.name) and entry.is_dir()


def short_id(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 70 else text[:67] + "..."
