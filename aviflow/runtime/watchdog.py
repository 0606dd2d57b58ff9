"""A rank's hang watchdog: heartbeats, and its Python stacks when a hang is suspected.

A daemon thread of every rank (started by the rank wrapper when ``AVIFLOW_HANG_TIMEOUT`` is
set) writes the rank's heartbeat to the run store every few seconds, and writes the stacks of
all its threads (``faulthandler``) when the job's driver asks for them (the attempt's stack
request file appears). It also re-arms ``faulthandler.dump_traceback_later`` on every beat:
that timer runs in C, without the GIL, so a rank stuck in a call that holds the GIL (its
threads cannot beat) still leaves its stacks behind once the hang timeout has passed. A rank
that stalls past the timeout again and again stops arming it once its file holds
:data:`STACKS_TIMER_BYTES`, so the file stays bounded.

A rank blocked in a collective (gloo/NCCL release the GIL) keeps beating; the driver then
sees the hang as "no step for hangTimeout" (see :mod:`aviflow.hang`).
"""

from __future__ import annotations

import faulthandler
import json
import os
import threading
import time
from typing import IO

from aviflow.runtime.env import RuntimeEnv
from aviflow.store import RunDir, atomic_write

BEAT_SECONDS = 2.0
# the timer's dumps stop once a rank's stacks file is this long (one dump of 100 threads is
# at most about 1 MiB; the driver reads a file's last MAX_STACK_BYTES, where the latest is)
STACKS_TIMER_BYTES = 4 << 20


class Watchdog(threading.Thread):
    def __init__(self, run: RunDir, node: RuntimeEnv, rank: int, timeout: float) -> None:
        super().__init__(name="aviflow-watchdog", daemon=True)
        self.rundir, self.node, self.rank, self.timeout = run, node, rank, timeout
        self.stop_event = threading.Event()
        path = run.stack_path(node.attempt, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        self._stacks: IO[str] = open(fd, "a")  # noqa: SIM115 - open for the process's life
        self._served = False

    def run(self) -> None:
        request = self.rundir.stack_request_path(self.node.attempt)
        while not self.stop_event.is_set():
            try:
                atomic_write(
                    self.rundir.rank_heartbeat_path(self.node.attempt, self.rank),
                    json.dumps({"time": time.time(), "pid": os.getpid(), "rank": self.rank}),
                )
                if self._room():
                    faulthandler.dump_traceback_later(self.timeout, file=self._stacks)
                else:  # a rank that stalls again and again: its earlier dumps are enough
                    faulthandler.cancel_dump_traceback_later()
                if not self._served and request.exists():
                    self._served = True
                    self.dump("stacks requested by the job's driver (suspected hang)")
            except OSError:
                pass  # the run store is briefly unreachable: beat again next time
            self.stop_event.wait(BEAT_SECONDS)

    def _room(self) -> bool:
        """Whether the stacks file may take another dump by the timer (it stops at
        :data:`STACKS_TIMER_BYTES`; the driver's request is always answered)."""
        return os.fstat(self._stacks.fileno()).st_size < STACKS_TIMER_BYTES

    def dump(self, why: str) -> None:
        self._stacks.write(
            f"=== rank {self.rank} pid {os.getpid()} at {time.time():.3f}: {why} ===\n"
        )
        self._stacks.flush()
        faulthandler.dump_traceback(file=self._stacks, all_threads=True)
        self._stacks.flush()

    def stop(self) -> None:
        self.stop_event.set()
        faulthandler.cancel_dump_traceback_later()
        if self.is_alive() and threading.current_thread() is not self:
            # a beat in flight ends (a daemon thread cut at exit leaves its temporary file)
            self.join(timeout=5.0)


def start(run: RunDir, node: RuntimeEnv, rank: int) -> Watchdog | None:
    """Start this rank's watchdog if the job has a hang timeout."""
    if node.hang_timeout is None:
        return None
    dog = Watchdog(run, node, rank, node.hang_timeout)
    dog.start()
    return dog
