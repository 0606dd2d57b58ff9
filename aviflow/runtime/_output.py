"""Send this process's stdout and stderr (and its children's) to a log file, appending.

The log is on the run store, which can fill up: a line the disk cannot take is dropped and
counted, not raised into the job's ``print`` (a full store would otherwise end the training
at its next line of output), and once the store takes bytes again the log says how much was
lost there. Children write to the same descriptors on their own terms.
"""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from aviflow.store import disk_full

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


class LogWriter(io.RawIOBase):
    """Raw writes to descriptor ``fd`` that a full disk cannot fail: what it does not take is
    dropped, counted in ``lost``, and said in a line before the next write that lands."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self.fd, self.lost = fd, 0

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.fd

    def write(self, b: ReadableBuffer, /) -> int:
        data = bytes(b)
        if self.lost and not self._put(self._note()):
            self.lost += len(data)
            return len(data)
        if self.lost:
            self.lost = 0
        try:
            return os.write(self.fd, data)
        except OSError as exc:
            if not disk_full(exc):
                raise
            self.lost += len(data)
            return len(data)

    def _note(self) -> bytes:
        return (
            f"[aviflow: {self.lost} bytes of output lost here: the run store was full]\n".encode()
        )

    def _put(self, data: bytes) -> bool:
        """Write all of ``data``; False (nothing more tried) when the disk is full."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError as exc:
            if not disk_full(exc):
                raise
            return False
        return True


def redirect_output(path: Path, header: str = "") -> None:
    """Point file descriptors 1 and 2 at ``path`` (created, appended), after ``header``; a
    symlink at ``path`` (left by the job's code) is refused, never written through."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    if header:
        try:
            os.write(fd, header.encode())
        except OSError as exc:  # a full run store: the job's own output decides, not this
            if not disk_full(exc):
                raise
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = _text(1)
    sys.stderr = _text(2)


def _text(fd: int) -> io.TextIOWrapper:
    """Line-buffered text on ``fd``, as ``open(fd, "w", buffering=1)`` but on a
    :class:`LogWriter`."""
    return io.TextIOWrapper(io.BufferedWriter(LogWriter(fd)), line_buffering=True)
