"""All jobs under one root: the index of job ids, locating a job, creating one whole.

:class:`RunStore` owns every path above a job's directory (:class:`~aviflow.store.RunDir`
owns those inside it). A job is created in a staging directory and renamed into place only
when complete, under an id reserved store-wide by a link in ``.ids/``. A job whose driver
has yet to take it up (a TrainJob to create) is marked in ``.pending/`` until the driver
:meth:`~RunStore.settle` s it, so a submission that never completed is found by reading the
marks alone (:meth:`~RunStore.pending`), not every job. A staging directory is marked in
``.staging/`` while it exists; one left by a writer killed mid-create is removed by a later
create once its mark is an hour old (:meth:`~RunStore.sweep_staging`).

Reads (:meth:`~RunStore.locate`, :meth:`~RunStore.ids`) and :meth:`~RunStore.create` never
move anything: a store of the flat layout of earlier versions is moved in by
:meth:`~RunStore.migrate_legacy`, an explicit step (:mod:`._migrate`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aviflow.errors import JobNotFound
from aviflow.names import is_dns1123_label, slugify
from aviflow.paging import read_pages
from aviflow.records import CheckpointRef, JobMeta, TrainerImage
from aviflow.store._data import CHECKPOINT_MARKER
from aviflow.store._files import append_line, is_file, read_lines
from aviflow.store._logs import tail_bytes
from aviflow.store._migrate import flat_job, migrate, needs_migration
from aviflow.store._rundir import CODE_DIR, DATA_DIR, DATA_DIRS, RUNTIME_SPEC, RunDir

if TYPE_CHECKING:
    from aviflow.spec import TrainJob

ROOT_ENV = "AVIFLOW_ROOT"
INDEX_DIR = ".ids"
INDEX_LOG = ".ids.jsonl"
PENDING_DIR = ".pending"
STAGING_DIR = ".staging"
STAGING_PREFIX = ".staging-"
STALE_STAGING = 3600.0  # seconds: a staging directory this old was left by a killed writer
STALE_RESERVATION = 60.0  # seconds: an id reserved this long ago with no directory was left


def default_root() -> Path:
    """``$AVIFLOW_ROOT``, else ``~/.aviflow/runs``."""
    env = os.environ.get(ROOT_ENV)
    return Path(env).expanduser() if env else Path.home() / ".aviflow" / "runs"


class RunStore:
    """All jobs under one root directory (the layout is in the module docstring)."""

    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root).expanduser() if root is not None else default_root()
        self._found: dict[str, Path] = {}

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r})"

    @property
    def index_dir(self) -> Path:
        return self.root / INDEX_DIR

    @property
    def pending_dir(self) -> Path:
        return self.root / PENDING_DIR

    @property
    def staging_dir(self) -> Path:
        return self.root / STAGING_DIR

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
        cached = self._found.get(job_id)
        if cached is not None and is_file(cached / "job.yaml", cached):
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
            if path.parent.parent == self.root and is_file(path / "job.yaml", path):
                self._found[job_id] = path
                return path
        return None

    def get(self, job_id: str) -> RunDir:
        path = self.locate(job_id)
        if path is None:
            if flat_job(self.root / job_id) is not None:  # not moved in yet: say how
                raise needs_migration(self.root, [job_id])
            raise JobNotFound(
                f"no job {job_id!r} in {self.root}; `aviflow ls` lists the jobs there"
            )
        return RunDir(path)

    @property
    def index_log(self) -> Path:
        return self.root / INDEX_LOG

    def ids(self, newest: int | None = None) -> list[str]:
        """Job ids, oldest submission first; with ``newest``, only the newest N of them (read
        from the end of the index: the cost does not grow with the number of jobs). A store
        with no index that holds finished jobs of the flat layout of earlier versions is a
        :class:`~aviflow.errors.StoreNeedsMigration` (:meth:`migrate_legacy`)."""
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
            rows = read_pages(lambda at: read_lines(self.index_log, at)).items
        else:
            fd = os.open(self.index_log, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _, data = tail_bytes(fd, os.fstat(fd).st_size, lines, 1 << 30)
            finally:
                os.close(fd)
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
        under their user's directory, into the index; the ids moved. An explicit step
        (``aviflow store migrate``, the start-up of a process that writes the store), never a
        read's. A legacy job that has not finished is left where it is (its supervisor uses
        its path)."""
        moved = migrate(self)
        if moved:
            self._found.clear()
        return moved

    def _scan_ids(self, newest: int | None) -> list[str]:
        """Without an index (one user's directory mounted alone): every job, by submit time."""
        found: list[tuple[float, str]] = []
        flat: list[str] = []
        try:
            users = [Path(e.path) for e in os.scandir(self.root) if _is_home(e)]
        except OSError:
            return []
        for home in users:
            if is_file(home / "job.yaml", home):  # a job of the flat layout, not a user's
                if flat_job(home) is not None:
                    flat.append(home.name)
                continue
            for entry in os.scandir(home):
                job_dir = Path(entry.path)
                if is_dns1123_label(entry.name) and is_file(job_dir / "job.yaml", job_dir):
                    try:
                        found.append((RunDir(Path(entry.path)).meta().submitted, entry.name))
                    except JobNotFound:
                        continue
        if flat:
            raise needs_migration(self.root, flat)
        ids = [job_id for _, job_id in sorted(found)]
        return ids if newest is None else ids[-newest:]

    def run_dirs(self) -> Iterator[RunDir]:
        for job_id in self.ids():
            path = self.locate(job_id)
            if path is not None:
                yield RunDir(path)

    def checkpoint_path(self, ref: CheckpointRef) -> Path:
        """Where ``ref`` is in this store (as this reader mounts it)."""
        run = self.get(ref.job_id)
        path = run.checkpoint_dir(ref.step)
        if not is_file(path / CHECKPOINT_MARKER, run.path):
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
        submission: str | None = None,
    ) -> RunDir:
        """Write a new job directory whole, then move it into place under a fresh unique id
        (or ``job_id``, which must be free: a TrainJob created on the cluster by name, a
        submission whose id its client chose). ``owner_ids``: the uid and gid the job's
        processes run as, given the directory when they are not this process's (pods as uid
        1000, a controller as root). ``submission``: the token the job's driver binds the
        directory by (:meth:`RunDir.submission_token`; a TrainJob's annotation); the job is
        then pending (:meth:`pending`) until the driver settles it.

        ``files`` maps paths relative to the job directory to their content. The directory
        only appears under the root when complete; a failure leaves nothing behind.
        """
        home = self.user_dir(user)
        home.mkdir(parents=True, exist_ok=True)
        self.index_dir.mkdir(exist_ok=True)
        token = secrets.token_hex(8)
        staging = Path(os.path.realpath(home)) / f"{STAGING_PREFIX}{token}"
        mark = self.staging_dir / token
        self.staging_dir.mkdir(exist_ok=True)
        mark.write_text(home.name)  # before the directory: a writer killed now leaves the mark
        staging.mkdir()
        try:
            for rel, content in files.items():
                target = (staging / rel).resolve()
                if staging.resolve() not in target.parents:
                    raise ValueError(f"refusing to write {rel!r} outside the job directory")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
            if (staging / CODE_DIR / RUNTIME_SPEC).exists():
                raise ValueError(
                    f"{CODE_DIR}/{RUNTIME_SPEC} is the runtime's; name the file otherwise"
                )
            (staging / CODE_DIR).mkdir(exist_ok=True)
            spec = job.to_yaml()  # written twice, serialised once
            (staging / "job.yaml").write_text(spec)
            (staging / CODE_DIR / RUNTIME_SPEC).write_text(spec)
            for sub in DATA_DIRS:
                (staging / DATA_DIR / sub).mkdir(parents=True)
            if submission is not None:
                RunDir(staging).write_json(RunDir(staging).submission_path, {"token": submission})
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
                _chown_tree(staging / DATA_DIR, *owner_ids)  # the job writes only its data part
            try:
                if submission is not None:  # marked before it appears: a crash leaves the mark
                    self.pending_dir.mkdir(exist_ok=True)
                    (self.pending_dir / job_id).touch()
                os.rename(staging, home / job_id)
                try:  # the store may fill just now: then the job goes as it came
                    line = {"id": job_id, "user": home.name, "time": meta.submitted}
                    append_line(self.index_log, line)
                except BaseException:
                    os.rename(home / job_id, staging)  # (removed below; a rename needs no space)
                    raise
            except BaseException:
                (self.pending_dir / job_id).unlink(missing_ok=True)
                (self.index_dir / job_id).unlink(missing_ok=True)
                raise
            self._found[job_id] = home / job_id
            return RunDir(home / job_id)
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
            mark.unlink(missing_ok=True)
            self.sweep_staging(time.time())

    def sweep_staging(self, now: float, older_than: float = STALE_STAGING) -> list[Path]:
        """Remove the staging directories of creates that never finished (their writer was
        killed) whose mark is older than ``older_than`` seconds, at the cost of reading the
        marks alone. The directories removed."""
        removed: list[Path] = []
        try:
            entries = list(os.scandir(self.staging_dir))
        except OSError:
            return removed
        for entry in entries:
            try:
                if now - entry.stat(follow_symlinks=False).st_mtime < older_than:
                    continue
                home = Path(entry.path).read_text()
            except OSError:
                continue
            token = entry.name
            if len(token) != 16 or not all(c in "0123456789abcdef" for c in token):
                continue  # not a mark this store wrote
            if is_dns1123_label(home):  # a user's directory, as create() names them
                left = Path(os.path.realpath(self.root / home)) / f"{STAGING_PREFIX}{token}"
                if left.is_dir() and not left.is_symlink():
                    shutil.rmtree(left, ignore_errors=True)
                    removed.append(left)
            Path(entry.path).unlink(missing_ok=True)
        return removed

    def _reserve_id(self, slug: str, user_dir: str, wanted: str | None = None) -> str:
        while True:
            job_id = wanted or new_job_id(slug)
            link = self.index_dir / job_id
            try:
                os.symlink(f"../{user_dir}/{job_id}", link)
                return job_id
            except FileExistsError:
                if wanted is None:
                    continue
                if self.locate(wanted) is None and _older_than(link, STALE_RESERVATION):
                    link.unlink(missing_ok=True)  # reserved by a writer that died before
                    continue  # renaming its directory into place
                raise FileExistsError(f"job id {wanted!r} is taken in {self.root}") from None

    def remove(self, job_id: str) -> None:
        """Delete a job's directory and index entry (a submission that did not go through);
        its line in the index log is skipped by readers since the job cannot be located."""
        path = self.locate(job_id)
        (self.index_dir / job_id).unlink(missing_ok=True)
        self.settle(job_id)
        self._found.pop(job_id, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def pending(self) -> list[tuple[str, float]]:
        """The jobs marked pending (created with a ``submission`` token and not settled
        yet), each with when it was marked, oldest first: what a driver reads to find the
        submissions that never completed, at the cost of the marks alone."""
        found = []
        try:
            entries = list(os.scandir(self.pending_dir))
        except OSError:
            return []
        for entry in entries:
            if not is_dns1123_label(entry.name):
                continue
            try:
                found.append((entry.stat(follow_symlinks=False).st_mtime, entry.name))
            except OSError:
                continue
        return [(job_id, when) for when, job_id in sorted(found)]

    def settle(self, job_id: str) -> None:
        """The job is no longer pending: its driver took it up, or recorded why not."""
        self.check_id(job_id)
        (self.pending_dir / job_id).unlink(missing_ok=True)


def new_job_id(slug: str) -> str:
    """A fresh job id for a job named ``slug``: the slug and 8 random hex digits (unique
    store-wide once reserved).

    >>> len(new_job_id("tiny")) == len("tiny-") + 8
    True
    """
    return f"{slug}-{secrets.token_hex(4)}"


def _older_than(path: Path, seconds: float) -> bool:
    try:
        return time.time() - os.lstat(path).st_mtime > seconds
    except OSError:
        return False


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
