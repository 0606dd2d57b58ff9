"""The detached supervisor of one local job: queue, then drive the lifecycle with processes.

``python -m aviflow.backends._supervisor RUN_DIR --capacity N [--rank-log-cap BYTES]
[--daemonize]``

It holds the job's supervisor lock for its whole life (liveness for everyone else), waits
for its turn in the FIFO queue, then feeds what it sees to the shared
:class:`~aviflow.lifecycle.Lifecycle` (admission, nodes up, a node's exit, the end of an
attempt, cancel, the clock) and carries out its actions: start attempt N (one
``python -m aviflow.runtime`` per node, each in its own session/process group), stop
attempt N (every process of the job, verified). The lifecycle decides restarts, time
limits and which rank failed first.

A full run store stops only the supervisor's records, never the job: the events it cannot
append wait in order (never half a line, never twice) and are recorded, with the status
they lead to, as soon as the disk takes them again; the job's processes keep running.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace

from aviflow import _procs, driving, usage
from aviflow._ports import free_port
from aviflow.backends._admission import decide
from aviflow.backends._forecast import forecast
from aviflow.backends.local import QUEUE_LOCK, read_quotas, scan_queues
from aviflow.history import CellHistory
from aviflow.lifecycle import (
    Admitted,
    AttemptEnded,
    CancelRequested,
    Hung,
    Lifecycle,
    Lost,
    NodeExited,
    NodesUp,
    Observation,
    Policy,
    StartAttempt,
    Step,
    StopAttempt,
    Tick,
)
from aviflow.pace import PaceCache
from aviflow.paging import read_pages
from aviflow.records import Event, EventType, FailureInfo, JobState, JobStatus
from aviflow.runtime.env import RuntimeEnv
from aviflow.spec import TrainJob
from aviflow.store import (
    EventsCache,
    RunDir,
    RunStore,
    atomic_write,
    disk_full,
    rank_log_share,
    read_json,
)

POLL_SECONDS = 0.1
QUEUE_POLL_SECONDS = 0.25
FORECAST_SECONDS = 5.0  # a waiting job's expected start is recomputed at least this often
RECORD_GRACE = 0.3  # let a failing rank finish writing its failure record
NODE_LOG_TAIL = 20000
RANK_LOG_TAIL = 4000
FULL_RETRY_SECONDS = 1.0  # how often a finished job's last records are tried on a full disk


class Supervisor:
    def __init__(
        self,
        run: RunDir,
        capacity: int,
        rank_log_cap: int | None = None,
        use: usage.UsageSettings | None = None,
    ) -> None:
        self.run = run
        self.use = use or usage.UsageSettings()
        self._use_checked = 0.0
        self.job: TrainJob = run.spec()
        self.capacity = capacity
        self.rank_log_cap = rank_log_cap  # the job's, all ranks together (None: no cap)
        self.lc = Lifecycle.from_events(
            Policy.from_spec(self.job.spec), read_pages(run.events).items
        )
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.cancel_asked = False
        self.cancel_message = "cancelled"
        self.gone = False
        self._finished_cache: set[str] = set()  # finished is final: never read again
        self._sizes: dict[str, tuple[str, int, str]] = {}  # job id -> (queue, slots, user)
        self._pending: list[Event] = []  # events the run store has not taken yet, in order
        self._stale = False  # status.json is behind the events
        self._full_since: float | None = None
        self._outages = driving.Outages(_say)  # hang judgment waits while the store is full
        self._full_why = ""

    # -- signals and requests --------------------------------------------------------------------
    def install_signals(self) -> None:
        signal.signal(signal.SIGTERM, self._on_cancel)
        signal.signal(signal.SIGINT, self._on_cancel)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_cancel(self, _signum: int, _frame: object) -> None:
        self.cancel_asked = True

    def _check_requests(self) -> None:
        asked = self.run.cancel_reason()
        if asked is not None:
            self.cancel_asked = True
            self.cancel_message = asked
        if not self.run.spec_path.exists():  # the run store was deleted under us
            self.gone = True

    # -- the lifecycle ---------------------------------------------------------------------------
    def observe(self, obs: Observation) -> None:
        """Feed one observation; record its events; carry out its actions."""
        self.apply(self.lc.observe(obs))

    def apply(self, step: Step) -> None:
        self.lc = step.lifecycle
        if step.events:
            self._pending.extend(step.events)
            self._stale = True
            self._flush()
        for action in step.actions:
            if isinstance(action, StartAttempt):
                self._spawn_nodes(action.attempt)
            elif isinstance(action, StopAttempt):
                self._stop_attempt(action.attempt)

    # -- records ---------------------------------------------------------------------------------
    def _flush(self) -> bool:
        """Append the events not recorded yet, then the status they lead to; False while the
        run store is full (they wait for the next try, which starts where this one stopped:
        an append either lands whole or not at all)."""
        try:
            while self._pending:
                self.run.append_event(self._pending[0])
                self._pending.pop(0)
            if self._stale:
                self.run.write_status(self.lc.status())
                self._stale = False
        except OSError as exc:
            if not disk_full(exc):
                raise
            if self._full_since is None:
                self._full_since = time.time()
                self._full_why = f"{exc.strerror}: {len(self._pending)} event(s) waited"
                # supervisor.log is likely on the same disk: said again once it takes lines
                _say(f"the run store is full ({self._full_why}); the job goes on")
            return False
        if self._full_since is not None:
            _say(
                f"the run store was full ({self._full_why}) for "
                f"{time.time() - self._full_since:.0f} s; recorded now"
            )
            self._full_since = None
        return True

    def _write_status(self, status: JobStatus) -> None:
        """A queue position or reason: skipped while the store is full or behind (the next
        one, or the flush, writes a fresh one)."""
        if self._pending or self._stale:
            return
        try:
            self.run.write_status(status)
        except OSError as exc:
            if not disk_full(exc):
                raise

    # -- queue -----------------------------------------------------------------------------------
    def wait_for_turn(self) -> bool:
        store, events = RunStore(self.run.store_root), EventsCache()  # forecasts' reads
        paces, history = PaceCache(), CellHistory(store)
        reported: tuple[object, ...] | None = None
        forecast_at, estimate, numbers = 0.0, None, None
        while True:
            self._check_requests()
            if self.cancel_asked or self.gone:
                return False
            held: list[str] = []
            with _procs.FileLock(store.file(QUEUE_LOCK)):
                waiting, in_use = scan_queues(
                    store,
                    own=self.run.id,
                    finished=self._finished_cache,
                    sizes=self._sizes,
                    held=held,
                )
                quotas = read_quotas(store)
                verdict = decide(self.run.id, waiting, in_use, self.capacity, quotas)
                if verdict.admit:
                    self.observe(Admitted(time.time()))
                    return True
            now = time.time()
            if (verdict.position, verdict.reason) != (reported or (None, None))[:2] or (
                now - forecast_at >= FORECAST_SECONDS
            ):
                forecast_at = now
                found, waits = forecast(
                    store, waiting, held, quotas, self.capacity, now, events=events,
                    paces=paces, history=history,
                )  # fmt: skip
                estimate, numbers = found.get(self.run.id), waits.get(self.run.id)
            if (verdict.position, verdict.reason, estimate, numbers) != reported:
                reported = (verdict.position, verdict.reason, estimate, numbers)
                self._write_status(
                    self.lc.status(
                        queue_position=verdict.position,
                        message=verdict.reason,
                        expected_start=estimate,
                        wait=numbers,
                    )
                )
            time.sleep(QUEUE_POLL_SECONDS)

    # -- one attempt -----------------------------------------------------------------------------
    def _spawn_nodes(self, attempt: int) -> None:
        port = free_port()
        self.nodes = []
        for rank in range(self.job.spec.nodes):
            node = RuntimeEnv(
                run_dir=self.run.path,
                node_rank=rank,
                num_nodes=self.job.spec.nodes,
                main_addr="127.0.0.1",
                main_port=port,
                attempt=attempt,
                keep_last=self.job.spec.checkpoints.keep_last,
                job_tag=self.run.id,
                hang_timeout=self.job.spec.hang_timeout_seconds,
                rank_log_bytes=rank_log_share(self.rank_log_cap, self.job.spec.total_gpus),
            )
            self.nodes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "aviflow.runtime"],
                    env={**os.environ, **node.to_env()},
                    cwd=self.run.code_dir,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        try:  # for a reaper after this supervisor's death; the job tag finds them too
            atomic_write(
                self.run.processes_path,
                json.dumps({"attempt": attempt, "pgids": [p.pid for p in self.nodes]}),
            )
        except OSError as exc:
            if not disk_full(exc):
                raise

    def _codes(self) -> dict[int, int | None]:
        return {i: p.poll() for i, p in enumerate(self.nodes)}

    def _nodes_up(self, attempt: int) -> bool:
        return all(
            self.run.heartbeat(rank).get("attempt") == attempt
            for rank in range(self.job.spec.nodes)
        )

    def _stop_attempt(self, attempt: int) -> None:
        time.sleep(RECORD_GRACE)
        codes = self._codes()
        left = _procs.stop_job(self.run.id, [p.pid for p in self.nodes])
        for p in self.nodes:
            p.wait()
        if left:
            print(f"aviflow supervisor: processes {left} survived SIGKILL", flush=True)
        if self.gone:
            return
        self.observe(AttemptEnded(time.time(), attempt, codes, self._failure(attempt, codes)))

    def _hung(self, attempt: int, now: float) -> bool:
        """Whether the running attempt is hung (then it was told to the lifecycle)."""
        spec = self.job.spec
        running = next(e.time for e in reversed(self.lc.events) if e.type is EventType.RUNNING)
        found = driving.watch_hang(
            self.run, attempt, spec.hang_timeout_seconds, running, spec.total_gpus,
            spec.gpus_per_node, now, self._outages,
        )  # fmt: skip
        if found is None:
            return False
        self.observe(Hung(now, attempt, found.message))
        return True

    def _watch_use(self, attempt: int, now: float) -> bool:
        """Record the attempt's use and flag it idle (:mod:`aviflow.usage`); True when the
        idle rule cancelled the job (then it was told to the lifecycle)."""
        if now - self._use_checked < min(1.0, self.use.interval):
            return False
        self._use_checked = now
        running = next(e.time for e in reversed(self.lc.events) if e.type is EventType.RUNNING)
        found = usage.watch(
            self.run, self.lc.events, attempt, running, self.job.spec.total_gpus, self.use, now
        )
        if found.events:
            lc = replace(self.lc, events=self.lc.events + found.events)
            self.apply(Step(lc, list(found.events)))
        if found.cancel is None:
            return False
        self.observe(CancelRequested(now, found.cancel))
        return True

    def _failure(self, attempt: int, codes: dict[int, int | None]) -> FailureInfo | None:
        """Who failed first, and why (see :mod:`aviflow.driving`); None if nothing failed."""
        if driving.nothing_failed(self.run, attempt, codes):
            return None
        return driving.attempt_failure(
            self.run,
            attempt,
            codes,
            self.job.spec.total_gpus,
            self.job.spec.gpus_per_node,
            lambda n: self._tail(self.run.node_log(n).as_posix(), NODE_LOG_TAIL),
            lambda r: self.run.log_tail(r, 40)[-RANK_LOG_TAIL:],
        )

    @staticmethod
    def _tail(path: str, size: int) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(max(0, os.fstat(f.fileno()).st_size - size))
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    # -- whole job -------------------------------------------------------------------------------
    def run_job(self) -> None:
        self._drive()
        while not self._flush():  # the end, recorded once the disk takes it
            self._check_requests()
            if self.gone:
                return
            time.sleep(FULL_RETRY_SECONDS)

    def _drive(self) -> None:
        if not self.wait_for_turn():
            if not self.gone:
                self.observe(CancelRequested(time.time(), self.cancel_message))
            return
        while not self.lc.state.is_finished():
            if self._pending or self._stale:
                self._flush()
            self._check_requests()
            if self.gone:
                _procs.stop_job(self.run.id, [p.pid for p in self.nodes])
                return
            if self.cancel_asked:
                self.observe(CancelRequested(time.time(), self.cancel_message))
                continue
            attempt, now = self.lc.attempt, time.time()
            codes = self._codes()
            if self.lc.state is JobState.STARTING and self._nodes_up(attempt):
                self.observe(NodesUp(now, attempt))
            if self.lc.state is JobState.RUNNING and self._hung(attempt, now):
                continue
            if self.lc.state is JobState.RUNNING and self._watch_use(attempt, now):
                continue
            if codes and all(c == 0 for c in codes.values()):
                self.observe(AttemptEnded(now, attempt, codes))
                continue
            failed = [(n, c) for n, c in codes.items() if c is not None and c != 0]
            if failed:
                node, code = failed[0]
                self.observe(NodeExited(now, attempt, node, code))
                continue
            self.observe(Tick(now))
            time.sleep(POLL_SECONDS)


def _say(text: str) -> None:
    """A line in supervisor.log, which may be on the full disk: never raises."""
    try:
        print(f"aviflow supervisor: {text}", flush=True)
    except OSError:
        pass


def _daemonize() -> None:
    """Detach: the submitter's child exits at once, the grandchild carries on."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def usage_arguments(parser: argparse.ArgumentParser) -> None:
    """The admin's use and idle settings (:class:`aviflow.usage.UsageSettings`)."""
    parser.add_argument("--usage-interval", type=float, default=usage.UsageSettings().interval)
    parser.add_argument("--idle-below", type=float, default=None, help="percent (none: no check)")
    parser.add_argument("--idle-after", type=float, default=None, help="seconds")
    parser.add_argument("--idle-action", choices=["flag", "cancel"], default="flag")


def usage_settings(ns: argparse.Namespace) -> usage.UsageSettings:
    idle = None
    if ns.idle_below is not None and ns.idle_after is not None:
        idle = usage.IdlePolicy(below=ns.idle_below, after=ns.idle_after, action=ns.idle_action)
    return usage.UsageSettings(interval=ns.usage_interval, idle=idle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m aviflow.backends._supervisor")
    parser.add_argument("run_dir")
    parser.add_argument("--capacity", type=int, required=True)
    parser.add_argument(
        "--rank-log-cap", type=int, default=0, help="the job's log cap in bytes (0: none)"
    )
    parser.add_argument("--daemonize", action="store_true")
    usage_arguments(parser)
    ns = parser.parse_args(argv)
    if ns.daemonize:
        _daemonize()
    run = RunDir(ns.run_dir)
    lock = _procs.FileLock(run.supervisor_lock)
    if not lock.acquire(blocking=False):
        print("aviflow supervisor: another supervisor holds this job", flush=True)
        return 1
    if run.status().state.is_finished():
        lock.release()  # cancelled (and recorded) before this supervisor got going
        return 0
    sup = Supervisor(run, ns.capacity, ns.rank_log_cap or None, usage_settings(ns))
    sup.install_signals()
    atomic_write(run.supervisor_info, json.dumps({"pid": os.getpid(), "started": time.time()}))
    try:
        sup.run_job()
    except BaseException as exc:
        import traceback

        traceback.print_exc()
        _procs.stop_job(run.id, read_json(run.processes_path, {}).get("pgids", []))
        if not run.status().state.is_finished():
            sup.apply(sup.lc.observe(Lost(time.time(), f"supervisor error: {exc!r}")))
        return 1
    finally:
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
