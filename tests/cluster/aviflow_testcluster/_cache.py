"""One build cache for every clone on this machine: what ``make`` and the test suite build once
and then reuse (the control plane's binaries and helm, the images' base, wheelhouse, proxy,
layer store and layout, unpacked image layers).

Where it lives: ``$AVIFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/aviflow``, else
``~/.cache/aviflow`` (:func:`cache_root`). ``make cache`` shows what is in it (this file run as
a script: it needs only the standard library), ``make clean-cache`` removes it.

An **entry** is a directory ``<root>/<kind>/<key>`` whose key hashes whatever built it
(:func:`key_of`), so every clone with the same inputs finds the same entry and a changed input
makes a new one. :meth:`Entry.ensure` makes an entry once, under an exclusive lock of its own
(concurrent callers wait, then find it), in a temporary directory renamed into place (a reader
never sees half an entry); it is never changed afterwards. Its ``.aviflow-entry`` file holds its
size, and that file's mtime is the entry's last use (:meth:`Entry.touch`).

**Stores** are the two shared, mutable parts the image build owns (buildah's layer store and
the OCI layout, ``_image_store``); their units are image builds, each with a stamp file
(``images/refs/<ref>``) whose mtime is its last use. Their size is measured when a build
changed them and recorded (``.stores-size``), so the cache's size is the sum of recorded sizes
and keeping it in bound costs no walk of the whole cache.

:func:`evict` keeps the cache within its bound (``AVIFLOW_CACHE_MAX_GB``, default 60): least
recently used first, it removes entries (and the image builds it is given as candidates:
``_image_store.prune``) until the cache fits, never one used within the grace period (an hour:
a test session still using it) nor one whose lock another process holds (being made or read).

>>> import tempfile
>>> c = Cache(Path(tempfile.mkdtemp()))
>>> made = c.entry("demo", key_of("v1")).ensure(lambda d: (d / "out").write_text("x"))
>>> (made / "out").read_text(), c.entry("demo", key_of("v1")).ensure(print) == made
('x', True)
>>> [(e.kind, e.key) for e in c.entries()] == [("demo", key_of("v1"))]
True
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_MAX_BYTES",
    "GRACE_SECONDS",
    "Cache",
    "Candidate",
    "Entry",
    "EntryInfo",
    "cache_root",
    "default_cache",
    "key_of",
]

META = ".aviflow-entry"
STORES_SIZE = ".stores-size"  # bytes of the image stores, as last measured
DEFAULT_MAX_BYTES = 60 * 10**9
GRACE_SECONDS = 3600.0
# kinds whose entries sit one level deeper (<root>/images/<kind>/<key>)
GROUPS = ("images",)


def cache_root(env: dict[str, str] | None = None) -> Path:
    """``$AVIFLOW_CACHE_DIR``, else ``$XDG_CACHE_HOME/aviflow``, else ``~/.cache/aviflow``.

    >>> str(cache_root({"XDG_CACHE_HOME": "/c"})), str(cache_root({"AVIFLOW_CACHE_DIR": "/x"}))
    ('/c/aviflow', '/x')
    """
    env = os.environ if env is None else env
    if env.get("AVIFLOW_CACHE_DIR"):
        return Path(env["AVIFLOW_CACHE_DIR"]).expanduser()
    xdg = env.get("XDG_CACHE_HOME") or str(Path(env.get("HOME") or Path.home()) / ".cache")
    return Path(xdg).expanduser() / "aviflow"


def max_bytes(env: dict[str, str] | None = None) -> int:
    """The bound: ``AVIFLOW_CACHE_MAX_GB`` (a number of 10^9 bytes), default 60.

    >>> max_bytes({"AVIFLOW_CACHE_MAX_GB": "1.5"}), max_bytes({})
    (1500000000, 60000000000)
    """
    env = os.environ if env is None else env
    raw = env.get("AVIFLOW_CACHE_MAX_GB", "")
    if not raw:
        return DEFAULT_MAX_BYTES
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"AVIFLOW_CACHE_MAX_GB must be a number of GB, not {raw!r}") from None
    if value <= 0:
        raise ValueError(f"AVIFLOW_CACHE_MAX_GB must be above 0, not {raw!r}")
    return int(value * 10**9)


def key_of(*parts: str | bytes | Path) -> str:
    """16 hex digits of the sha256 of ``parts`` in order (a :class:`Path`: its file's bytes).

    >>> key_of("a", b"b") == key_of("a", b"b") != key_of("ab")
    True
    """
    h = hashlib.sha256()
    for part in parts:
        data = part.read_bytes() if isinstance(part, Path) else part
        data = data.encode() if isinstance(data, str) else data
        h.update(len(data).to_bytes(8, "big"))
        h.update(data)
    return h.hexdigest()[:16]


def du(path: Path) -> int:
    """Bytes under ``path`` as allocated on disk (``du -s``; hard links counted once)."""
    if not path.exists():
        return 0
    out = subprocess.run(
        ["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True, check=False
    ).stdout.split()
    return int(out[0]) if out else 0


@contextlib.contextmanager
def _flock(path: Path, *, shared: bool = False, blocking: bool = True) -> Iterator[bool]:
    """An flock on ``path`` (made if missing); yields whether it was taken (``blocking=False``
    may not take it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        flags = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        try:
            fcntl.flock(f, flags | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@dataclass(frozen=True)
class EntryInfo:
    """What :meth:`Cache.entries` reports of one entry."""

    kind: str
    key: str
    path: Path
    size: int
    last_used: float


@dataclass(frozen=True)
class Entry:
    """``<root>/<kind>/<key>``: made once by :meth:`ensure`, then only read and touched."""

    cache: Cache
    kind: str
    key: str

    @property
    def path(self) -> Path:
        return self.cache.root / self.kind / self.key

    @property
    def lock_path(self) -> Path:
        return self.cache.root / self.kind / f".{self.key}.lock"

    def ready(self) -> bool:
        return (self.path / META).is_file()

    def touch(self) -> None:
        """Record a use now (the eviction order)."""
        with contextlib.suppress(OSError):
            os.utime(self.path / META)

    def ensure(
        self, make: Callable[[Path], object], *, log: Callable[[str], None] | None = None
    ) -> Path:
        """The entry's directory, made by ``make(tmp)`` first if it is not there. ``make``
        fills ``tmp``; on an exception nothing is left. Then the cache is kept in its bound."""
        if self.ready():
            self.touch()
            return self.path
        with _flock(self.lock_path):
            if self.ready():
                self.touch()
                return self.path
            tmp = self.path.with_name(f".{self.key}.tmp{os.getpid()}")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            try:
                make(tmp)
                self.seal(tmp)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            shutil.rmtree(self.path, ignore_errors=True)  # a half entry of an older layout
            tmp.rename(self.path)
        evict(self.cache, keep={self.path}, log=log)
        return self.path

    def remove(self, *, blocking: bool = True) -> bool:
        """Remove the entry (renamed away first: gone for readers at once). ``blocking=False``
        returns False instead of waiting when another process holds its lock."""
        with _flock(self.lock_path, blocking=blocking) as taken:
            if not taken:
                return False
            if self.path.exists():
                trash = self.path.with_name(f".{self.key}.evicted{os.getpid()}")
                self.path.rename(trash)
                shutil.rmtree(trash, ignore_errors=True)
            return True

    @staticmethod
    def seal(directory: Path) -> None:
        """Write ``directory``'s metadata (its size, when it was made): it is complete."""
        meta = {"size": du(directory), "created": time.time()}
        (directory / META).write_text(json.dumps(meta))


@dataclass(frozen=True)
class Cache:
    """The cache at ``root`` (:func:`default_cache`: the one the environment names)."""

    root: Path

    def entry(self, kind: str, key: str) -> Entry:
        if not kind or not key or ".." in Path(kind).parts or "/" in key or key.startswith("."):
            raise ValueError(f"bad cache entry {kind!r}/{key!r}")
        return Entry(self, kind, key)

    def kinds(self) -> list[str]:
        """The kinds that hold entries, e.g. ``cluster-bin``, ``images/layers``."""
        if not self.root.is_dir():
            return []
        found = []
        for d in sorted(self.root.iterdir()):
            if not d.is_dir() or d.name.startswith("."):
                continue
            if d.name in GROUPS:
                found += [f"{d.name}/{s.name}" for s in sorted(d.iterdir()) if _holds_entries(s)]
            elif _holds_entries(d):
                found.append(d.name)
        return found

    def entries(self, kinds: Iterable[str] | None = None) -> list[EntryInfo]:
        out = []
        for kind in self.kinds() if kinds is None else kinds:
            for d in sorted((self.root / kind).iterdir()):
                meta = d / META
                if d.name.startswith(".") or not meta.is_file():
                    continue
                try:
                    size = int(json.loads(meta.read_text()).get("size", 0))
                    used = meta.stat().st_mtime
                except (OSError, ValueError):
                    continue
                out.append(EntryInfo(kind, d.name, d, size, used))
        return out

    def size(self) -> int:
        """The entries' recorded sizes and the stores' last measured one (no walk)."""
        return sum(e.size for e in self.entries()) + self.stores_size()

    def stores_size(self) -> int:
        try:
            return int(json.loads((self.root / STORES_SIZE).read_text())["bytes"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def record_stores_size(self, size: int) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{STORES_SIZE}.{os.getpid()}"
        tmp.write_text(json.dumps({"bytes": size, "measured": time.time()}))
        tmp.replace(self.root / STORES_SIZE)

    def clean(self) -> None:
        """Remove everything (unmounting what buildah's store left mounted under it first)."""
        if not self.root.exists():
            return
        root = str(self.root.resolve())
        with contextlib.suppress(OSError):
            mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
            for m in sorted((m for m in mounts if m.startswith(root + "/")), reverse=True):
                subprocess.run(["umount", m], check=False, capture_output=True)
        shutil.rmtree(self.root)


def _holds_entries(d: Path) -> bool:
    return d.is_dir() and any(
        (e / META).is_file() for e in d.iterdir() if not e.name.startswith(".")
    )


def default_cache() -> Cache:
    return Cache(cache_root())


@dataclass(frozen=True)
class Candidate:
    """Something eviction may remove: an entry, or an image build the stores' owner prunes."""

    path: Path
    last_used: float
    size: int
    remove: Callable[[], None]


def evict(
    cache: Cache,
    *,
    bound: int | None = None,
    grace: float = GRACE_SECONDS,
    keep: Iterable[Path] = (),
    extra: Iterable[Candidate] = (),
    log: Callable[[str], None] | None = None,
) -> list[Path]:
    """Remove the least recently used entries (and ``extra`` candidates) until the cache is
    within ``bound``; return what was removed. Skips what is in ``keep``, what was used within
    ``grace`` seconds, and entries whose lock is held. Cheap: it reads recorded sizes."""
    bound = max_bytes() if bound is None else bound
    total = cache.size()
    if total <= bound:
        return []
    keep = {Path(p) for p in keep}
    now = time.time()
    candidates = [
        Candidate(e.path, e.last_used, e.size, _remover(cache.entry(e.kind, e.key)))
        for e in cache.entries()
    ]
    candidates += list(extra)
    removed = []
    for c in sorted(candidates, key=lambda c: c.last_used):
        if total <= bound:
            break
        if c.path in keep or now - c.last_used < grace:
            continue
        try:
            c.remove()
        except _Busy:
            continue
        removed.append(c.path)
        total -= c.size
        if log:
            log(
                f"aviflow cache: evicted {c.path} ({c.size / 1e9:.2f} GB, unused for "
                f"{(now - c.last_used) / 3600:.1f} h)"
            )
    if total > bound and log:
        log(
            f"aviflow cache: {total / 1e9:.1f} GB is over its bound of {bound / 1e9:.1f} GB, "
            "but the rest was used within the last hour (AVIFLOW_CACHE_MAX_GB raises the bound)"
        )
    return removed


class _Busy(Exception):
    pass


def _remover(entry: Entry) -> Callable[[], None]:
    def remove() -> None:
        if not entry.remove(blocking=False):
            raise _Busy(entry.path)

    return remove


def main(argv: list[str] | None = None) -> int:
    """``python tests/cluster/aviflow_testcluster/_cache.py {show,root,clean,evict,seal DIR}``
    (standard library only: ``make clean-cache`` works before ``.venv`` exists)."""
    ap = argparse.ArgumentParser(prog="aviflow build cache")
    ap.add_argument(
        "action", nargs="?", default="show", choices=["show", "root", "clean", "evict", "seal"]
    )
    ap.add_argument("dir", nargs="?", type=Path, help="seal: the directory to seal")
    args = ap.parse_args(argv)
    cache = default_cache()
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    if args.action == "root":
        print(cache.root)
    elif args.action == "show":
        entries = cache.entries()
        total = du(cache.root)
        print(
            f"{cache.root}: {total / 1e9:.2f} GB (bound {max_bytes() / 1e9:.0f} GB, "
            "AVIFLOW_CACHE_MAX_GB)"
        )
        for e in sorted(entries, key=lambda e: e.last_used):
            age = (time.time() - e.last_used) / 3600
            print(f"  {e.size / 1e9:7.2f} GB  used {age:6.1f} h ago  {e.kind}/{e.key}")
        rest = total - sum(e.size for e in entries)
        print(f"  {rest / 1e9:7.2f} GB  the image stores (buildah's layer store, the OCI layout)")
    elif args.action == "clean":
        cache.clean()
        print(f"removed {cache.root}", file=sys.stderr)
    elif args.action == "evict":
        evict(cache, log=log)
    elif args.action == "seal":
        if args.dir is None or not args.dir.is_dir():
            ap.error("seal needs the directory of a new entry")
        Entry.seal(args.dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
