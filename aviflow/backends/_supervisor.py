"""The detached supervisor of one local job: queue, launch, watch, restart, stop.

``python -m aviflow.backends._supervisor RUN_DIR --capacity N [--daemonize]``

It holds ``supervisor.lock`` for its whole life (liveness for everyone else), waits for its
turn in the FIFO queue, starts one ``python -m aviflow.runtime`` per node (each in its own
session/process group), and treats the group as one: any node failing stops all nodes and
either restarts the whole group from the latest checkpoint (``maxRestarts``) or fails the job.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from aviflow import _procs
from aviflow.backends._admission import decide
from aviflow.backends.local import (
    CANCEL_REQUEST,
    SUPERVISOR_INFO,
    SUPERVISOR_LOCK,
    read_quotas,
    scan_queues,
)
from aviflow.failures import first_failure, launcher_root_causes
from aviflow.spec import TrainJob
from aviflow.status import RESTARTING, Event, JobState
from aviflow.store import RunDir, RunStore, atomic_write, read_json

POLL_SECONDS = 0.1
QUEUE_POLL_SECONDS = 0.25


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Supervisor:
    def __init__(self, run: RunDir, capacity: int) -> None:
        self.run = run
        self.job: TrainJob = run.spec()
        self.capacity = capacity
        self.stop_reason: tuple[JobState, str] | None = None
        self.gone = False
        self._finished_cache: set[str] = set()  # finished is final: never read again
        self._sizes: dict[str, tuple[str, int]] = {}  # job id -> (queue, GPU slots)

    # -- signals ---------------------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_cancel)
        signal.signal(signal.SIGINT, self._on_cancel)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_cancel(self, _signum: int, _frame: object) -> None:
        self.stop_reason = (JobState.CANCELLED, "cancelled")

    def _check_cancel_file(self) -> None:
        if self.stop_reason is not None:
            return
        if (self.run.path / CANCEL_REQUEST).exists():
            self.stop_reason = (JobState.CANCELLED, "cancelled")
        elif not self.run.spec_path.exists():  # the run store was deleted under us
            self.gone = True
            self.stop_reason = (JobState.CANCELLED, "the run directory was removed")

    # -- queue -----------------------------------------------------------------------------------
    def wait_for_turn(self) -> bool:
        store = RunStore(self.run.path.parent)
        reported = None
        while True:
            self._check_cancel_file()
            if self.stop_reason:
                return False
            with _procs.FileLock(store.root / ".queue.lock"):
                waiting, in_use = scan_queues(
                    store, own=self.run.id, finished=self._finished_cache, sizes=self._sizes
                )
                verdict = decide(
                    self.run.id, waiting, in_use, self.capacity, read_quotas(store.root)
                )
                if verdict.admit:
                    self.run.record(
                        Event(JobState.STARTING, attempt=1, message="starting"), queuePosition=None
                    )
                    return True
                if (verdict.position, verdict.reason) != reported:
                    reported = (verdict.position, verdict.reason)
                    status = self.run.status()
                    status.update(queuePosition=verdict.position, message=verdict.reason)
                    self.run.write_status(status)
            time.sleep(QUEUE_POLL_SECONDS)

    # -- one attempt -----------------------------------------------------------------------------
    def _spawn_nodes(self, attempt: int) -> list[subprocess.Popen[bytes]]:
        port = _free_port()
        nodes = []
        for rank in range(self.job.spec.nodes):
            env = dict(os.environ)
            env.update(
                AVIFLOW_RUN_DIR=str(self.run.path),
                AVIFLOW_NODE_RANK=str(rank),
                AVIFLOW_NUM_NODES=str(self.job.spec.nodes),
                AVIFLOW_MAIN_ADDR="127.0.0.1",
                AVIFLOW_MAIN_PORT=str(port),
                AVIFLOW_ATTEMPT=str(attempt),
                AVIFLOW_JOB_ID=self.run.id,
                **{_procs.TAG: self.run.id},
            )
            nodes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "aviflow.runtime"],
                    env=env,
                    cwd=self.run.code_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        atomic_write(
            self.run.path / "processes.json",
            json.dumps({"attempt": attempt, "pgids": [p.pid for p in nodes]}),
        )
        return nodes

    def _nodes_up(self, attempt: int) -> bool:
        for rank in range(self.job.spec.nodes):
            beat = read_json(self.run.heartbeats_dir / f"node-{rank}.json", {})
            if beat.get("attempt") != attempt:
                return False
        return True

    def _failure(self, attempt: int, codes: dict[int, int | None]) -> dict[str, object]:
        """Who failed first, and why (see :mod:`aviflow.failures`)."""
        logs = {n: self._node_log_tail(n) for n in codes}
        causes = [c for n in sorted(codes) for c in launcher_root_causes(logs[n])]
        first = first_failure(self.run.failures(attempt), causes)
        failed = [n for n, c in codes.items() if c not in (None, 0)]
        info: dict[str, object] = {}
        if first is not None:
            info = {
                k: first[k] for k in ("rank", "exception", "message", "traceback") if k in first
            }
            rank = int(first["rank"])
            info["node"] = first.get("node", rank // self.job.spec.gpus_per_node)
            if not info.get("traceback"):
                info["log_tail"] = self._tail(self.run.rank_log(rank))
        elif failed:
            info = {
                "node": failed[0],
                "exit_code": codes[failed[0]],
                "log_tail": logs[failed[0]][-4000:],
            }
        return info

    def _node_log_tail(self, node: int) -> str:
        return self._tail(self.run.node_log(node), 20000)

    @staticmethod
    def _tail(path: Path, size: int = 4000) -> str:
        try:
            return path.read_text(errors="replace")[-size:]
        except FileNotFoundError:
            return ""

    def run_attempt(
        self, attempt: int, deadline: float | None
    ) -> tuple[JobState | None, str, dict[str, object]]:
        """Run every node once. Returns (final state or None to restart, message, failure info)."""
        nodes = self._spawn_nodes(attempt)
        running = False
        while True:
            self._check_cancel_file()
            codes = {i: p.poll() for i, p in enumerate(nodes)}
            if not running and self._nodes_up(attempt):
                running = True
                self.run.record(Event(JobState.RUNNING, attempt=attempt, message="running"))
            if all(c == 0 for c in codes.values()):
                return JobState.SUCCEEDED, "all ranks finished", {}
            failed = [n for n, c in codes.items() if c not in (None, 0)]
            if deadline is not None and time.time() > deadline and self.stop_reason is None:
                self.stop_reason = (
                    JobState.FAILED,
                    f"timeLimit {self.job.spec.time_limit} exceeded",
                )
            if failed or self.stop_reason:
                time.sleep(0.3)  # let the failing rank finish writing its record
                codes = {i: p.poll() for i, p in enumerate(nodes)}
                left = _procs.stop_job(self.run.id, [p.pid for p in nodes])
                for p in nodes:
                    p.wait()
                if left:
                    print(f"aviflow supervisor: processes {left} survived SIGKILL", flush=True)
                if self.stop_reason:
                    state, message = self.stop_reason
                    return state, message, {}
                info = self._failure(attempt, codes)
                where = (
                    f"rank {info['rank']}"
                    if info.get("rank") is not None
                    else f"node {info.get('node')}"
                )
                return None, f"{where} failed", info
            time.sleep(POLL_SECONDS)

    # -- whole job -------------------------------------------------------------------------------
    def run_job(self) -> None:
        if not self.wait_for_turn():
            if self.gone:
                return
            state, message = self.stop_reason or (JobState.CANCELLED, "cancelled")
            self.run.record(Event(state, attempt=0, message=message), queuePosition=None)
            return
        limit = self.job.spec.time_limit_seconds
        deadline = time.time() + limit if limit else None
        attempt = 1
        while True:
            state, message, failure = self.run_attempt(attempt, deadline)
            if self.gone:
                return
            if state is not None:
                self.run.record(Event(state, attempt=attempt, message=message))
                return
            if attempt > self.job.spec.max_restarts:
                self.run.record(
                    Event(JobState.FAILED, attempt=attempt, message=message, data=failure),
                    failure=failure,
                )
                return
            self.run.record(Event(RESTARTING, attempt=attempt, message=message, data=failure))
            attempt += 1
            self.run.record(
                Event(
                    JobState.STARTING,
                    attempt=attempt,
                    message=f"restart {attempt - 1} of {self.job.spec.max_restarts}",
                )
            )


def _daemonize() -> None:
    """Detach: the submitter's child exits at once, the grandchild carries on."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aviflow.backends._supervisor")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--capacity", type=int, required=True)
    parser.add_argument("--daemonize", action="store_true")
    ns = parser.parse_args(argv)
    if ns.daemonize:
        _daemonize()
    run = RunDir(ns.run_dir)
    lock = _procs.FileLock(run.path / SUPERVISOR_LOCK)
    if not lock.acquire(blocking=False):
        print("aviflow supervisor: another supervisor holds this job", flush=True)
        return 1
    if JobState(run.status().get("state", JobState.QUEUED)).is_finished():
        lock.release()  # cancelled (and recorded) before this supervisor got going
        return 0
    sup = Supervisor(run, ns.capacity)
    sup.install_signals()
    atomic_write(
        run.path / SUPERVISOR_INFO, json.dumps({"pid": os.getpid(), "started": time.time()})
    )
    try:
        sup.run_job()
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        _procs.stop_job(run.id, read_json(run.path / "processes.json", {}).get("pgids", []))
        if not JobState(run.status().get("state", JobState.QUEUED)).is_finished():
            run.record(
                Event(
                    JobState.FAILED,
                    attempt=run.status().get("attempt", 0),
                    message=f"supervisor error: {exc!r}",
                )
            )
        return 1
    finally:
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
