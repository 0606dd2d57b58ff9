"""Process helpers: process groups, parent-death signals and a marker-based sweep.

Every process the test cluster starts (control plane, node agent, pod containers)
carries the environment variable ``AVIFLOW_TESTCLUSTER`` set to the cluster's id.
Teardown first signals the process groups it knows, then sweeps ``/proc`` for any
survivor carrying the marker (a pod process that called ``setsid`` or double-forked),
so no process outlives the cluster. ``marked_pids(cluster_id)`` is also what the
tests use to verify that.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

MARKER = "AVIFLOW_TESTCLUSTER"

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL it when the parent dies.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def spawn(
    argv: list[str],
    *,
    env: Mapping[str, str],
    log: Path | None = None,
    cwd: str | os.PathLike | None = None,
    die_with_parent: bool = False,
) -> subprocess.Popen:
    """Start ``argv`` in a new session (its own process group), output to ``log``."""
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - handed to the child
    try:
        return subprocess.Popen(
            argv,
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,
        )
    finally:
        if log:
            out.close()


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def group_alive(pgid: int) -> bool:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def stop_group(pgid: int, grace: float, *, reap: subprocess.Popen | None = None) -> None:
    """SIGTERM the process group, wait up to ``grace`` seconds, then SIGKILL it."""
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if reap is not None:
            reap.poll()
        if not group_alive(pgid):
            break
        time.sleep(0.05)
    else:
        _signal_group(pgid, signal.SIGKILL)
    if reap is not None:
        try:
            reap.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def marked_pids(value: str, *, prefix: bool = False) -> list[int]:
    """Pids of live processes whose environment has ``AVIFLOW_TESTCLUSTER=value``."""
    needle = f"{MARKER}={value}".encode()
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        marked = any(e == needle or (prefix and e.startswith(needle)) for e in env)
        if marked and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def kill_pids(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def sweep(value: str, *, prefix: bool = False, timeout: float = 5.0) -> list[int]:
    """SIGKILL every marked process until none is left; return the pids seen."""
    seen: list[int] = []
    deadline = time.monotonic() + timeout
    while True:
        pids = marked_pids(value, prefix=prefix)
        if not pids or time.monotonic() > deadline:
            return seen + pids
        seen += pids
        kill_pids(pids)
        time.sleep(0.05)
