"""Files of the run store, read and written without following a job's symlinks.

A job's directory holds what its code wrote, so every path under it is hostile: a component
may be a symlink (to another user's run, to the service's own token, to ``/etc/passwd``), a
FIFO that blocks a reader forever, a device, or a file of many gigabytes. Every function here
takes the trusted directory the path must stay beneath (``beneath``: a job's directory, which
the platform made) and opens the rest of the path:

- with ``openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`` where the kernel has it (Linux 5.6),
  else one component at a time with ``O_NOFOLLOW``: a symlink at any component is refused;
- with ``O_NONBLOCK``, then ``fstat``: only a regular file (or, for listings, a directory) is
  read, so a FIFO, socket or device is refused at once instead of blocking;
- reading a bounded number of bytes.

A refused path raises :class:`UnsafeJobFile` (a :class:`~aviflow.errors.RequestError`: the API
answers it as a 400 naming the file); a missing one reads as missing. Writers follow no symlink
either: a temporary file made with ``O_EXCL | O_NOFOLLOW`` and renamed over the target inside
the same directory descriptor, appends with ``O_NOFOLLOW`` to a regular file only; a failed
write leaves no temporary file behind.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from aviflow.errors import UnsafeJobFile
from aviflow.paging import Batch

MAX_RECORD_BYTES = 1 << 20  # one JSON record a job or the platform wrote (marker, heartbeat...)
MAX_LINES_READ = 8 << 20  # bytes one incremental read of a JSON-lines file returns at most
T = TypeVar("T")

_RESOLVE_NO_MAGICLINKS = 0x02
_RESOLVE_NO_SYMLINKS = 0x04
_RESOLVE_BENEATH = 0x08
_SYS_OPENAT2 = 437  # the same number on every architecture (a syscall added after the unification)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW
_openat2: Any = None  # the libc syscall function once found; False where the kernel lacks it


def _components(rel: str | Path) -> list[str]:
    parts = str(rel).split("/")
    if not parts or any(p in ("", ".", "..") for p in parts):
        raise UnsafeJobFile(f"{str(rel)[:200]!r} is not a plain relative path")
    return parts


def _syscall_openat2() -> Any:
    global _openat2
    if _openat2 is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)

            class OpenHow(ctypes.Structure):
                _fields_ = [
                    ("flags", ctypes.c_uint64),
                    ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64),
                ]

            libc.syscall.restype = ctypes.c_long

            def call(dir_fd: int, path: str, flags: int, mode: int) -> int:
                how = OpenHow(
                    flags, mode, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS
                )
                fd = libc.syscall(
                    _SYS_OPENAT2,
                    ctypes.c_int(dir_fd),
                    ctypes.c_char_p(os.fsencode(path)),
                    ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)),
                )
                if fd < 0:
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), path)
                return int(fd)

            _openat2 = call
        except (OSError, AttributeError):
            _openat2 = False
    return _openat2


def use_openat2(enabled: bool) -> None:
    """Use ``openat2`` when the kernel has it (the default), or always walk the components
    (``False``: the fallback, which tests run too)."""
    global _openat2
    _openat2 = None if enabled else False


def _refused(rel: str | Path, exc: OSError) -> UnsafeJobFile:
    what = {
        errno.ELOOP: "a symlink",
        errno.ENOTDIR: "below a symlink or a file where a directory should be",
        errno.EXDEV: "outside its directory",
        errno.ENXIO: "a socket or device",
    }.get(exc.errno or 0, os.strerror(exc.errno or 0).lower())
    return UnsafeJobFile(
        f"{str(rel)[:200]!r} in the job's directory is {what}; Aviflow reads only regular "
        "files the job wrote there and follows no symlink"
    )


def _open_at(dir_fd: int, rel: str | Path, flags: int, mode: int = 0o644) -> int:
    """A descriptor of ``rel`` beneath ``dir_fd``, no symlink followed at any component."""
    parts = _components(rel)
    flags |= os.O_CLOEXEC | os.O_NOFOLLOW
    call = _syscall_openat2()
    if call:
        try:
            return int(call(dir_fd, "/".join(parts), flags, mode))
        except OSError as exc:
            if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL):
                raise
            use_openat2(False)  # no openat2 here (an old kernel, or a seccomp filter)
    fd = dir_fd
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            if fd != dir_fd:
                os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags, mode, dir_fd=fd)
    finally:
        if fd != dir_fd:
            os.close(fd)


@contextmanager
def _dir(beneath: Path) -> Iterator[int]:
    fd = os.open(beneath, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def _rel(path: Path, beneath: Path) -> str:
    try:
        return str(Path(path).relative_to(beneath))
    except ValueError:
        raise UnsafeJobFile(f"{str(path)[:200]!r} is not in {str(beneath)[:200]!r}") from None


@contextmanager
def open_beneath(path: Path, beneath: Path, *, writable: bool = False) -> Iterator[int]:
    """A read-only (``writable``: read-write, not appending) descriptor of the regular file
    ``path`` (inside ``beneath``); raises FileNotFoundError when it is missing and
    :class:`UnsafeJobFile` when it is a symlink (at any component) or not a regular file."""
    rel = _rel(path, beneath)
    mode = os.O_RDWR if writable else os.O_RDONLY
    try:
        with _dir(beneath) as base:
            fd = _open_at(base, rel, mode | os.O_NONBLOCK)
    except FileNotFoundError as exc:
        raise FileNotFoundError(errno.ENOENT, "no such file", str(path)) from exc
    except UnsafeJobFile:
        raise
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV, errno.ENXIO, errno.EOPNOTSUPP):
            raise _refused(rel, exc) from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise UnsafeJobFile(
                f"{rel[:200]!r} in the job's directory is not a regular file (a FIFO, "
                "socket, device or directory); Aviflow does not read it"
            )
        yield fd
    finally:
        os.close(fd)


def read_bytes(path: Path, beneath: Path, limit: int = MAX_RECORD_BYTES) -> bytes:
    """The whole file ``path`` (see :func:`open_beneath`), refused when over ``limit`` bytes."""
    with open_beneath(path, beneath) as fd:
        size = os.fstat(fd).st_size
        if size > limit:
            raise UnsafeJobFile(
                f"{_rel(path, beneath)[:200]!r} in the job's directory is {size} bytes, "
                f"more than the {limit} Aviflow reads of it"
            )
        return pread_all(fd, 0, limit + 1)[:limit]


def pread_all(fd: int, offset: int, count: int) -> bytes:
    """Up to ``count`` bytes of ``fd`` from ``offset`` (fewer only at the end of the file)."""
    chunks, done = [], 0
    while done < count:
        chunk = os.pread(fd, min(count - done, 1 << 20), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def read_json(path: Path, default: Any = None, *, beneath: Path | None = None) -> Any:
    """The JSON in ``path``; ``default`` if it is missing, unreadable, refused or too large.
    ``beneath``: the trusted directory it must be in (its parent when not given)."""
    try:
        return json.loads(read_bytes(path, beneath or Path(path).parent))
    except (OSError, ValueError, RecursionError):  # UnsafeJobFile is a ValueError
        return default


def read_lines(
    path: Path,
    since: int = 0,
    *,
    beneath: Path | None = None,
    limit: int = MAX_LINES_READ,
    rows: int | None = None,
    budget: int | None = None,
) -> Batch[dict[str, Any]]:
    """The JSON objects of ``path``'s complete lines from byte ``since`` on, one page of them
    (see :func:`read_records`)."""
    return read_records(
        path, _json_object, since, beneath=beneath, limit=limit, rows=rows, budget=budget
    )


def _json_object(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def read_records(
    path: Path,
    parse: Callable[[dict[str, Any]], T | None],
    since: int = 0,
    *,
    beneath: Path | None = None,
    limit: int = MAX_LINES_READ,
    rows: int | None = None,
    budget: int | None = None,
    weigh: Callable[[T], int] | None = None,
) -> Batch[T]:
    """One page of the records of the JSON-lines file ``path`` from byte ``since`` on:
    ``parse`` of each complete line that is a JSON object (a line ``parse`` returns None
    for, or that is not a JSON object, is skipped), at most ``rows`` records and at most
    ``budget`` bytes of them as ``weigh`` counts them (default: their lines' bytes), read
    from at most ``limit`` bytes of the file. ``next`` is the offset after the last line the
    page used; ``more`` says a record, or bytes beyond the ``limit`` read, follow it.

    Hostile files stay bounded: a line still being written is left for the next read; a
    line longer than ``limit`` is skipped (the cursor moves past it; a read that starts
    inside a line drops that line's rest), and so is a record heavier than ``budget`` on
    its own. A missing file reads as empty; a refused one raises :class:`UnsafeJobFile`.
    """
    since = max(int(since), 0)
    try:
        with open_beneath(path, beneath or Path(path).parent) as fd:
            size = os.fstat(fd).st_size
            since = min(since, size)
            return _page(fd, since, limit, size, parse, rows, budget, weigh)
    except FileNotFoundError:
        return Batch([], since)


_CHUNK = 64 << 10  # bytes a page reads at a time (pages usually end long before the limit)


def _page(
    fd: int,
    since: int,
    limit: int,
    size: int,
    parse: Callable[[dict[str, Any]], T | None],
    rows: int | None,
    budget: int | None,
    weigh: Callable[[T], int] | None,
) -> Batch[T]:
    """The page of :func:`read_records` from the lines of at most ``limit`` bytes of ``fd``
    (of ``size`` bytes) from ``since`` on."""
    end = min(since + limit, size)
    inside = since > 0 and os.pread(fd, 1, since - 1) != b"\n"  # the cursor is inside a line
    out: list[T] = []
    used = 0
    data, base, i, read_to = b"", since, 0, since  # data[0] is at file offset base
    while True:
        newline = data.find(b"\n", i)
        if newline < 0:
            if read_to >= end:
                break
            data, base, i = data[i:], base + i, 0
            chunk = pread_all(fd, read_to, min(max(_CHUNK, len(data)), end - read_to))
            if not chunk:
                break  # the file shrank
            data, read_to = data + chunk, read_to + len(chunk)
            continue
        line, start, i = data[i:newline], base + i, newline + 1
        if inside:  # the rest of a line too long to read
            inside = False
            continue
        record = _record(line, parse)
        if record is None:
            continue
        weight = weigh(record) if weigh is not None else len(line) + 1
        if budget is not None and weight > budget:
            continue  # heavier than any page may be
        if (rows is not None and len(out) >= rows) or (
            budget is not None and used + weight > budget
        ):
            return Batch(out, start, True)  # the page is full and this record follows
        out.append(record)
        used += weight
    cursor = base + i  # after the last complete line
    if inside or (cursor == since and read_to - since >= limit):
        cursor = read_to  # no line ends in what may be read: skip what was read
    return Batch(out, cursor, end < size)


def _record(line: bytes, parse: Callable[[dict[str, Any]], T | None]) -> T | None:
    if not line.strip():
        return None
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return parse(obj) if isinstance(obj, dict) else None


def list_names(directory: Path, beneath: Path) -> list[str]:
    """Names in ``directory`` (inside ``beneath``); empty when it is missing, a symlink or
    not a directory."""
    if Path(directory) == Path(beneath):
        try:
            return os.listdir(beneath)
        except OSError:
            return []
    try:
        with _dir(beneath) as base:
            fd = _open_at(base, _rel(directory, beneath), _DIR_FLAGS)
    except (OSError, ValueError):
        return []
    try:
        return os.listdir(fd)
    finally:
        os.close(fd)


def is_dir(path: Path, beneath: Path) -> bool:
    """Whether ``path`` is a directory reached without a symlink (inside ``beneath``)."""
    try:
        with _dir(beneath) as base:
            os.close(_open_at(base, _rel(path, beneath), _DIR_FLAGS))
    except (OSError, ValueError):
        return False
    return True


def is_file(path: Path, beneath: Path) -> bool:
    """Whether ``path`` is a regular file reached without a symlink (inside ``beneath``)."""
    try:
        with open_beneath(path, beneath):
            return True
    except (OSError, ValueError):
        return False


@contextmanager
def _parent(path: Path, beneath: Path | None) -> Iterator[int]:
    """A descriptor of ``path``'s directory: reached without symlinks from ``beneath``, or
    opened as it is (a directory the platform owns) when ``beneath`` is None."""
    parent = Path(path).parent
    if beneath is None or parent == Path(beneath):
        fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        rel = _rel(parent, beneath)
        try:
            with _dir(beneath) as base:
                fd = _open_at(base, rel, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR, errno.EXDEV):
                raise _refused(rel, exc) from None
            raise
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def replacing(path: Path, *, beneath: Path | None = None, sync: bool = True) -> Iterator[int]:
    """A descriptor of a new file that replaces ``path`` whole when the block ends (a reader
    sees the old file or the new one). It is made with ``O_EXCL | O_NOFOLLOW`` in ``path``'s
    directory (reached without a symlink below ``beneath``) and renamed over ``path``, never
    writing through a symlink there; when the block raises it is removed and ``path`` stays
    as it was. ``sync``: fsync it first (a record must survive a crash; a log need not)."""
    name = Path(path).name
    tmp = f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    with _parent(path, beneath) as dir_fd:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=dir_fd,
        )
        try:
            try:
                yield fd
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise


def remove_temporaries(path: Path, *, beneath: Path) -> None:
    """Remove the temporary files :func:`replacing` made for ``path`` and left behind when
    its process was killed (a name of ``path``'s own: ``.<name>.<pid>.<random>.tmp``)."""
    prefix = f".{Path(path).name}."
    try:
        with _parent(path, beneath) as dir_fd:
            for name in os.listdir(dir_fd):
                if name.startswith(prefix) and name.endswith(".tmp"):
                    try:
                        os.unlink(name, dir_fd=dir_fd)  # a link itself, never its target
                    except (FileNotFoundError, IsADirectoryError, PermissionError):
                        pass
    except (OSError, ValueError):
        pass  # no directory, or not one this reaches without a symlink


def disk_full(exc: OSError) -> bool:
    """Whether ``exc`` says the run store takes no more bytes (no space, or over quota)."""
    return exc.errno in (errno.ENOSPC, errno.EDQUOT)


# what libraries that wrap the OS error say instead (safetensors: "No space left on device
# (os error 28)"); torch.save says nothing of it ("unexpected pos ...")
_FULL_WORDS = ("no space left on device", "disk quota exceeded", "os error 28", "os error 122")
LOW_SPACE = 1 << 20  # bytes: a file system with less left to a user is full to them


def out_of_space(exc: BaseException, path: Path) -> bool:
    """Whether ``exc``, raised while writing under ``path``, came from a full run store: an
    ENOSPC or EDQUOT :class:`OSError` in its chain, words that say so, or -- for a library
    that says nothing of it -- less than :data:`LOW_SPACE` left to this user on ``path``'s
    file system now (a write that filled it leaves it so until its partial file goes)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and disk_full(cause):
            return True
        if any(words in str(cause).lower() for words in _FULL_WORDS):
            return True
        cause = cause.__cause__ or cause.__context__
    return low_on_space(path)


def low_on_space(path: Path) -> bool:
    """Whether ``path``'s file system has less than :data:`LOW_SPACE` bytes, or no file,
    left to this user now: what a rank writes there (a heartbeat, a metric row) may not land."""
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    no_files = st.f_files > 0 and st.f_favail == 0  # (a file system without a count has 0)
    return st.f_bavail * st.f_frsize < LOW_SPACE or no_files


def atomic_write(path: Path, data: str | bytes, *, beneath: Path | None = None) -> None:
    """Replace ``path`` with ``data`` so that a reader sees the old or the new file, whole.
    No symlink is followed (the target itself is replaced, never written through), nor any
    component below ``beneath``; a failed write removes its temporary file."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path, beneath=beneath) as fd:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]


def copy_range(src: int, dst: int, start: int, end: int) -> int:
    """Append bytes ``[start, end)`` of descriptor ``src`` to ``dst`` (at its position),
    in the kernel where it can (``copy_file_range``); fewer only where ``src`` ends sooner.
    Returns the bytes copied."""
    done = 0
    while start + done < end:
        count = min(end - start - done, 1 << 24)
        try:
            n = os.copy_file_range(src, dst, count, start + done)
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            chunk = os.pread(src, min(count, 1 << 20), start + done)
            n, view = len(chunk), memoryview(chunk)
            while view:
                view = view[os.write(dst, view) :]
        if n == 0:
            break
        done += n
    return done


def append_line(path: Path, obj: dict[str, Any], *, beneath: Path | None = None) -> None:
    """Append one JSON line with a single ``write`` on an O_APPEND descriptor of a regular
    file (created if missing; a symlink or special file there is refused).

    Never torn, never tearing: a line cut short before (a crash, a full disk) is ended first,
    so it stays a bad line of its own instead of swallowing this one; a write the disk
    cannot take whole (ENOSPC, EDQUOT) is taken back and raises, leaving the file as it
    was."""
    append_lines(path, [obj], beneath=beneath)


def append_lines(path: Path, objs: list[dict[str, Any]], *, beneath: Path | None = None) -> None:
    """:func:`append_line` for several lines at once: one ``write``, so that all of them land
    or none does (a full disk never keeps the first of two events that belong together)."""
    if not objs:
        return
    line = b"".join((json.dumps(o, separators=(",", ":")) + "\n").encode() for o in objs)
    with _parent(path, beneath) as dir_fd:
        try:
            fd = os.open(
                Path(path).name,
                os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                0o644,
                dir_fd=dir_fd,
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise _refused(Path(path).name, exc) from None
            raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeJobFile(f"{Path(path).name!r} is not a regular file; nothing appended")
        if st.st_size and os.pread(fd, 1, st.st_size - 1) != b"\n":
            line = b"\n" + line  # the torn line before stays alone
        written = os.write(fd, line)
        if written != len(line):
            os.ftruncate(fd, st.st_size)
            raise OSError(
                errno.ENOSPC,
                f"{Path(path).name}: the disk took {written} of {len(line)} bytes; "
                "nothing appended (free space on the run store)",
            )
    finally:
        os.close(fd)
