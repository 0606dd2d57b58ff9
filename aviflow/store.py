"""The run store: one directory per job, written atomically, readable while the job runs.

Layout of ``<root>/<job-id>/``::

    job.yaml          the validated TrainJob spec
    meta.json         id, user, backend, submit time, code hash, origin (notebook/cell)
    code/             the code snapshot + MANIFEST.json (sha256 per file, content hash)
    events.jsonl      append-only lifecycle events (QUEUED, STARTING, RUNNING, RESTARTING, ...)
    status.json       the latest state, rewritten atomically
    logs/             node-<r>.log (launcher) and rank-<R>.log (each process)
    failures/         rank-<R>.json, written by a rank that raised
    heartbeats/       node-<r>.json, refreshed by each node's runtime
    metrics.jsonl     one JSON object per logged step
    checkpoints/      step-<N>/ directories, complete ones carry aviflow-checkpoint.json

Writers replace whole files with ``os.replace`` or append whole lines with one ``write``,
so readers never see a torn file. Job ids are DNS-1123 labels, checked before any path
is built from them, so no id can point outside the root.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Container, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow.errors import JobNotFound
from aviflow.names import is_dns1123_label
from aviflow.status import Event, JobState

if TYPE_CHECKING:  # the spec (pydantic) is imported only where a spec is read or written,
    from aviflow.spec import TrainJob  # so every rank's wrapper starts fast

CHECKPOINT_MARKER = "aviflow-checkpoint.json"


def default_root() -> Path:
    env = os.environ.get("AVIFLOW_ROOT")
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


def read_lines(path: Path) -> Iterator[dict[str, Any]]:
    """Complete JSON lines of ``path``; a line still being written is left out."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    for raw in data.split(b"\n")[:-1]:
        if raw.strip():
            yield json.loads(raw)


def read_json(path: Path, default: Any = None) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return default


def scan_checkpoints(directory: Path) -> list[dict[str, Any]]:
    """Complete checkpoints (sub-directories with a marker file) in ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    found = []
    for d in directory.iterdir():
        marker = read_json(d / CHECKPOINT_MARKER) if d.is_dir() else None
        if marker:
            found.append({**marker, "path": str(d)})
    return sorted(found, key=lambda c: c["step"])


class RunDir:
    """Typed access to one job's directory."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.id = path.name

    def __repr__(self) -> str:
        return f"RunDir({str(self.path)!r})"

    # files
    @property
    def spec_path(self) -> Path:
        return self.path / "job.yaml"

    @property
    def code_dir(self) -> Path:
        return self.path / "code"

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
    def metrics_path(self) -> Path:
        return self.path / "metrics.jsonl"

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / "checkpoints"

    @property
    def events_path(self) -> Path:
        return self.path / "events.jsonl"

    def rank_log(self, rank: int) -> Path:
        return self.logs_dir / f"rank-{int(rank)}.log"

    def node_log(self, node: int) -> Path:
        return self.logs_dir / f"node-{int(node)}.log"

    # content
    def spec(self) -> TrainJob:
        from aviflow.spec import TrainJob

        return TrainJob.from_yaml(self.spec_path.read_text())

    def meta(self) -> dict[str, Any]:
        return read_json(self.path / "meta.json", {})

    def write_meta(self, meta: dict[str, Any]) -> None:
        atomic_write(self.path / "meta.json", json.dumps(meta, indent=2))

    def status(self) -> dict[str, Any]:
        return read_json(self.path / "status.json", {})

    def write_status(self, status: dict[str, Any]) -> None:
        atomic_write(self.path / "status.json", json.dumps(status, indent=2))

    def state(self) -> JobState:
        return JobState(self.status().get("state", JobState.QUEUED))

    def record(self, event: Event, **status: Any) -> None:
        """Append ``event``; if it is a state, also rewrite status.json with ``status`` merged in."""
        append_line(self.events_path, event.to_dict())
        if event.type in JobState.__members__:
            current = self.status()
            current.update(status, state=event.type, attempt=event.attempt, updated=event.time)
            if event.message:
                current["message"] = event.message
            self.write_status(current)

    def events(self) -> list[Event]:
        return [Event.from_dict(d) for d in read_lines(self.events_path)]

    def metrics(self) -> list[dict[str, Any]]:
        return list(read_lines(self.metrics_path))

    def ranks(self) -> list[int]:
        if not self.logs_dir.is_dir():
            return []
        return sorted(int(p.stem.split("-")[1]) for p in self.logs_dir.glob("rank-*.log"))

    def failures(self, attempt: int | None = None) -> list[dict[str, Any]]:
        """Failure records of ranks that raised (of one attempt, or all), earliest first."""
        if not self.failures_dir.is_dir():
            return []
        records = [read_json(p) for p in self.failures_dir.glob("*.json")]
        return sorted(
            (r for r in records if r and (attempt is None or r.get("attempt") == attempt)),
            key=lambda r: r["time"],
        )

    def failure_path(self, attempt: int, rank: int) -> Path:
        return self.failures_dir / f"attempt-{int(attempt)}-rank-{int(rank)}.json"

    def checkpoints(self) -> list[dict[str, Any]]:
        """Complete checkpoints, oldest first: ``{"step", "path", "time", "attempt"}``."""
        return scan_checkpoints(self.checkpoints_dir)


class RunStore:
    """All jobs under one root directory."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()

    def path_for(self, job_id: str) -> Path:
        if not isinstance(job_id, str) or not is_dns1123_label(job_id):
            raise JobNotFound(f"{job_id!r} is not a job id (ids look like 'tiny-3f9a1c2b')")
        return self.root / job_id

    def get(self, job_id: str) -> RunDir:
        path = self.path_for(job_id)
        if not (path / "job.yaml").is_file():
            raise JobNotFound(
                f"no job {job_id!r} in {self.root}; `aviflow ls` lists the jobs there"
            )
        return RunDir(path)

    def ids(self, exclude: Container[str] = ()) -> list[str]:
        """Job ids, oldest submission first (``exclude``: ids to leave out unread)."""
        if not self.root.is_dir():
            return []
        runs = []
        for p in self.root.iterdir():
            if p.name in exclude or not is_dns1123_label(p.name):
                continue
            if (p / "job.yaml").is_file():
                runs.append((RunDir(p).meta().get("submitted_ns", 0), p.name))
        return [name for _, name in sorted(runs)]

    def create(self, job: TrainJob, files: dict[str, bytes], meta: dict[str, Any]) -> RunDir:
        """Write a new job directory whole, then move it into place under a fresh unique id.

        ``files`` maps paths relative to the job directory to their content. The directory
        only appears under the root when complete; a failure leaves nothing behind.
        """
        self.root.mkdir(parents=True, exist_ok=True)
        staging = Path(os.path.realpath(self.root)) / f".staging-{secrets.token_hex(8)}"
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
            while True:
                job_id = f"{job.slug}-{secrets.token_hex(4)}"
                meta = {
                    **meta,
                    "id": job_id,
                    "name": job.metadata.name,
                    "submitted": time.time(),
                    "submitted_ns": time.time_ns(),
                }
                (staging / "meta.json").write_text(json.dumps(meta, indent=2))
                try:
                    os.rename(staging, self.root / job_id)  # fails if the id is taken
                    break
                except OSError:
                    if not (self.root / job_id).exists():
                        raise
            return RunDir(self.root / job_id)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
