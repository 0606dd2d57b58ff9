"""Rank logs: read by offset or tail, and held within a cap by rotation.

A rank's output goes to ``logs/rank-R.log``, which its wrapper holds open with ``O_APPEND``.
Where a job has a log cap, each node's launcher calls :func:`cap_log` about once a second
for the ranks it runs. A log past half its rank's share is rotated as ``logrotate``'s
``copytruncate`` rotates: the log's last lines (at most an eighth of the share, 64 KiB) stay,
what came before them (at most half the share, from a line's start) is copied to
``rank-R.log.1``, which it replaces, and the live file is cut in place to a marker line and
those last lines, so the rank's writers, appending, carry on at its new end::

    === aviflow: log rotated: 3145728 bytes came before the lines below; rank-0.log.1 keeps
    the last 524288 of them, the other 2621440 are gone (this log and rank-0.log.1 are capped
    at 1048576 bytes together) ===

(one line). So the live log always ends with the rank's latest lines. At a job's end the
launcher checks once more, and cuts a ``.1`` longer than half the share back: the log and
its ``.1`` then take at most the share. While the job runs they may pass it by what the rank
writes between two checks, and a rotation loses what the rank writes in the instant between
its last look at the file and the cut (as ``copytruncate`` does).

Readers count offsets in the log as one stream, from its first byte before any rotation: the
marker says where the lines below it are in that stream (:func:`log_origin`), so a reader's
cursor stays good across a rotation and a reader that had read to the end reads on with no
line twice. A cursor before those lines (its place was rotated away) reads on from the live
file's start: the chunk's ``offset`` is not the one asked for, and its text starts with the
marker that says what is gone. A cursor past the end (a log the job cut itself) gets a
``next`` below it, which tells a reader to start again from the tail.

The job may have made any of these files a symlink, a FIFO, a directory or a hard link:
every open goes through :mod:`._files` (no symlink followed, regular files only), a log with
other hard links is not cut, reads and copies are bounded by the share (and what the rank
writes meanwhile), and ``.1`` is replaced by rename, never written through.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from aviflow._units import parse_bytes
from aviflow.errors import UnsafeJobFile
from aviflow.records import LogChunk
from aviflow.store._files import copy_range, open_beneath, pread_all, replacing

MAX_LOG_READ = 1 << 20  # bytes one log read returns at most
MAX_TAIL_LINES = 100_000
MIN_RANK_LOG_CAP = 64 << 10  # the least share of a job's log cap a rank gets
DEFAULT_JOB_LOG_CAP = "8Gi"  # the admin's setting when they give none (rankLogCap)
RANK_LOG_CAP_HELP = (
    "The most one job's rank logs take on the run store, all its ranks together: bytes or a "
    "quantity such as 8Gi (at least 64Ki); null: no cap. Each rank's share (at least 64Ki) "
    "holds its logs/rank-R.log and rank-R.log.1: past half of it, the log's last lines stay "
    "and what came before goes to rank-R.log.1, replacing it (README: rank logs)."
)
# what the Helm schema checks at render time (the loader checks the rest: a quantity's size)
RANK_LOG_CAP_SCHEMA: dict[str, Any] = {
    "anyOf": [
        {"type": "integer", "minimum": MIN_RANK_LOG_CAP},
        {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?(k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$"},
        {"type": "null"},
    ]
}
MAX_KEPT_TAIL = 64 << 10  # the most of a log's last lines that stay in it at a rotation
MAX_ORIGIN = 1 << 52  # a larger offset in a marker is not believed (JavaScript's exact integers)
_MARKER = re.compile(rb"=== aviflow: log rotated: (\d{1,16}) bytes came before the lines below;")
_MARKER_READ = 512  # bytes of a log's start that hold a whole marker line
_LINE_SEARCH = 64 << 10  # how far a cut looks for a line's start
_CATCH_UP = 4  # rounds that follow what the rank writes while its log is copied


@dataclass(frozen=True)
class Rotation:
    """What one rotation did: ``cut`` bytes from the live file's start, ``.1`` keeping the last
    ``kept`` of them; ``tail`` bytes (the last lines) stayed, after the marker."""

    cut: int
    kept: int
    tail: int


def marker(before: int, old: str, kept: int, cap: int) -> bytes:
    """The line a rotated log starts with: ``before`` bytes of the log came before the lines
    that follow it, of which ``old`` (``.1``) keeps ``kept``.

    >>> line = marker(3145728, "rank-0.log.1", 524288, 1 << 20).decode()
    >>> line[:67], line.rstrip().endswith("2621440 are gone (this log and rank-0.log.1 are "
    ...                                   "capped at 1048576 bytes together) ===")
    ('=== aviflow: log rotated: 3145728 bytes came before the lines below', True)
    """
    rest = f"the other {before - kept} are gone" if before > kept else "none is gone"
    return (
        f"=== aviflow: log rotated: {before} bytes came before the lines below; {old} keeps "
        f"the last {kept} of them, {rest} (this log and {old} are capped at {cap} bytes "
        "together) ===\n"
    ).encode()


def log_origin(fd: int) -> tuple[int, int]:
    """(where the lines after the marker on the file's first line are in the log, the
    marker's length): ``(0, 0)`` for a file without one, or whose number is past
    :data:`MAX_ORIGIN` or inside the marker itself (a job may forge one)."""
    head = os.pread(fd, _MARKER_READ, 0)
    found, newline = _MARKER.match(head), head.find(b"\n")
    if found is None or newline < 0:
        return 0, 0
    top, mark = int(found.group(1)), newline + 1
    return (top, mark) if mark <= top < MAX_ORIGIN else (0, 0)


def job_log_cap(value: int | str | None) -> int | None:
    """A job's log cap in bytes from an admin's setting: a byte count or a quantity such as
    ``8Gi`` (None: no cap); at least :data:`MIN_RANK_LOG_CAP`. A ValueError says what is wrong.

    >>> job_log_cap("8Gi") == 8 << 30, job_log_cap(None)
    (True, None)
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{value!r} is not a number of bytes; use e.g. '8Gi' or null (no cap)")
    cap = parse_bytes(value)
    if cap < MIN_RANK_LOG_CAP:
        raise ValueError(
            f"{value!r} is less than the least log cap, {MIN_RANK_LOG_CAP} bytes (64Ki)"
        )
    return cap


def _checked_log_cap(value: int | str | None) -> int | str | None:
    job_log_cap(value)
    return value


# an admin's ``rankLogCap`` in a backend's settings (the local backend's, the cluster's)
RankLogCap = Annotated[
    int | str | None,
    AfterValidator(_checked_log_cap),
    Field(alias="rankLogCap", description=RANK_LOG_CAP_HELP, json_schema_extra=RANK_LOG_CAP_SCHEMA),
]


def rank_log_share(job_cap: int | None, world: int) -> int | None:
    """Each of ``world`` ranks' share of a job's log cap (None: no cap), at least
    :data:`MIN_RANK_LOG_CAP`.

    >>> rank_log_share(8 << 30, 16) == 512 << 20, rank_log_share(1 << 20, 64)
    (True, 65536)
    """
    if job_cap is None:
        return None
    return max(job_cap // max(world, 1), MIN_RANK_LOG_CAP)


def cap_log(
    path: Path, old: Path, cap: int, *, beneath: Path, final: bool = False
) -> Rotation | None:
    """Hold the live log ``path`` and its previous part ``old`` (``.1``) within ``cap`` bytes
    together: rotate ``path`` when it is past half of ``cap`` (see the module doc); when
    ``final`` (the ranks have ended), also cut ``old`` back to half of ``cap`` if a rotation
    left it longer. Returns what it rotated, or None.

    A missing log is left for later; a symlinked or special one, or one with other hard
    links, raises :class:`~aviflow.errors.UnsafeJobFile` and is left as it is. A ``cap`` below
    :data:`MIN_RANK_LOG_CAP` counts as that."""
    cap = max(cap, MIN_RANK_LOG_CAP)
    half = cap // 2
    done = None
    try:
        with open_beneath(path, beneath, writable=True) as fd:
            st = os.fstat(fd)
            if st.st_nlink > 1:  # the same file has another name: cutting it cuts that too
                raise UnsafeJobFile(
                    f"{path.name!r} has other hard links; Aviflow does not cut it in place"
                )
            if st.st_size > half:
                done = _rotate(fd, old, half, cap, beneath)
    except FileNotFoundError:
        pass
    if final:
        _trim(old, half, beneath)
    return done


def _rotate(fd: int, old: Path, half: int, cap: int, beneath: Path) -> Rotation:
    top, mark = log_origin(fd)
    origin = top - mark  # where this file's first byte is in the log
    keep = min(half // 4, MAX_KEPT_TAIL)
    end = os.fstat(fd).st_size
    cut = _tail_start(fd, end, keep, 0)
    with replacing(old, beneath=beneath, sync=False) as out:
        kept = copy_range(fd, out, _line_start(fd, max(cut - half, 0)), cut)
        for _ in range(_CATCH_UP):  # the rank wrote on while this copied: .1 takes more
            later = _tail_start(fd, os.fstat(fd).st_size, keep, cut)
            if later <= cut:
                break
            kept += copy_range(fd, out, cut, later)
            cut = later
    tail = pread_all(fd, cut, os.fstat(fd).st_size - cut)
    head = marker(origin + cut, old.name, kept, cap) + tail
    # write the marker and the last lines over the file's start, then cut it there: what the
    # rank writes from now on lands after them
    view, at = memoryview(head), 0
    while at < len(head):
        at += os.pwrite(fd, view[at:], at)
    os.ftruncate(fd, len(head))
    return Rotation(cut, kept, len(tail))


def _tail_start(fd: int, end: int, keep: int, least: int) -> int:
    """Where the last lines of a file of ``end`` bytes start: at most ``keep`` bytes before
    its end, at a line's start, not before ``least``."""
    return min(_line_start(fd, max(end - keep, least)), end)


def _trim(old: Path, half: int, beneath: Path) -> None:
    """Cut ``old`` (which nothing writes to) back to its last ``half`` bytes."""
    try:
        with open_beneath(old, beneath) as fd:
            end = os.fstat(fd).st_size
            if end > half:
                start = _line_start(fd, end - half)
                with replacing(old, beneath=beneath, sync=False) as out:
                    copy_range(fd, out, start, end)
    except (FileNotFoundError, UnsafeJobFile):
        pass  # nothing there, or not a file this caps (a job's symlink takes no room)


def _line_start(fd: int, pos: int) -> int:
    """The first line's start at or after ``pos`` (``pos`` itself when no line ends in the
    64 KiB that follow)."""
    if pos <= 0:
        return 0
    cut = os.pread(fd, _LINE_SEARCH, pos - 1).find(b"\n")
    return pos if cut < 0 else pos + cut


def read_log(
    path: Path,
    rank: int,
    *,
    beneath: Path,
    tail: int | None = None,
    offset: int | None = None,
    limit: int = MAX_LOG_READ,
) -> LogChunk:
    """See :meth:`RunDir.log`. Reads cost the bytes returned, not the size of the file; a
    log that is a symlink or not a regular file raises :class:`UnsafeJobFile`. Offsets count
    from the log's first byte before any rotation (see the module doc)."""
    if tail is not None and offset is not None:
        raise ValueError("give tail or offset, not both")
    if tail is not None and not 0 <= tail <= MAX_TAIL_LINES:
        raise ValueError(f"tail must be between 0 and {MAX_TAIL_LINES} lines")
    if offset is not None and offset < 0:
        raise ValueError("offset must be >= 0")
    try:
        with open_beneath(path, beneath) as fd:
            return _chunk(fd, rank, tail, offset, limit)
    except FileNotFoundError:
        return LogChunk(rank, "", 0, 0, 0)
    except UnsafeJobFile as exc:
        raise UnsafeJobFile(f"rank {rank}'s log: {exc}") from None


def _chunk(fd: int, rank: int, tail: int | None, offset: int | None, limit: int) -> LogChunk:
    size = os.fstat(fd).st_size
    top, mark = log_origin(fd) if size else (0, 0)
    origin = top - mark  # where this file's first byte is in the log
    if offset is not None:
        # a place rotated away reads on from the file's start: the marker says what is gone
        start = 0 if offset < top else min(mark + offset - top, size)
        data = os.pread(fd, min(limit, size - start), start)
        data = data[: _whole_characters(data)]
        text = data.decode("utf-8", "replace")
        return LogChunk(rank, text, origin + start, origin + start + len(data), origin + size)
    end = origin + size
    if tail == 0:
        return LogChunk(rank, "", end, end, end)
    start, data = tail_bytes(fd, size, tail, limit)
    return LogChunk(rank, data.decode("utf-8", "replace"), origin + start, end, end)


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


def tail_bytes(fd: int, size: int, lines: int | None, limit: int) -> tuple[int, bytes]:
    """(start offset, bytes) of the last ``lines`` lines (all when None), at most ``limit``
    bytes, read backwards from the end of descriptor ``fd`` in blocks."""
    end, buf = size, b""
    while end > 0 and len(buf) <= limit:
        start = max(0, end - 8192)
        buf = os.pread(fd, end - start, start) + buf
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
