"""Send this process's stdout and stderr (and its children's) to a log file, appending."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from aviflow.store import disk_full


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
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
