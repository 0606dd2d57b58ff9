"""Process helpers for the local backend: find a job's processes, stop them, verify.

Every process of a local job carries ``AVIFLOW_JOB_TAG=<job id>`` in its environment,
inherited by everything it starts, so a job's processes can be found even when they
left their process group.
"""

from __future__ import annotations

import fcntl
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from aviflow.runtime.env import JOB_TAG as TAG


def tagged(job_id: str) -> list[psutil.Process]:
    """Live processes (zombies excluded) whose environment carries this job's tag."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.pid == os.getpid() or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(TAG) == job_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def _signal_all(pgids: Iterable[int], procs: Iterable[psutil.Process], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass
    for proc in procs:
        try:
            proc.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass


def stop_job(job_id: str, pgids: Iterable[int], grace: float = 5.0) -> list[int]:
    """SIGTERM the job's process groups and tagged processes, SIGKILL what is left after
    ``grace`` seconds, and return the pids still alive afterwards (empty: verified)."""
    pgids = list(pgids)
    _signal_all(pgids, tagged(job_id), signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not tagged(job_id):
            break
        time.sleep(0.1)
    for _ in range(50):
        left = tagged(job_id)
        if not left:
            return []
        _signal_all(pgids, left, signal.SIGKILL)
        psutil.wait_procs(left, timeout=0.2)
    return [p.pid for p in tagged(job_id)]


class FileLock:
    """An exclusive ``flock``; the kernel drops it when its holder dies."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, blocking: bool = True) -> bool:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return False
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> FileLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def is_locked(path: Path) -> bool:
    """Whether some live process holds the flock on ``path``."""
    if not path.exists():
        return False
    probe = FileLock(path)
    if probe.acquire(blocking=False):
        probe.release()
        return False
    return True
