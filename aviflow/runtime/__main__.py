"""``python -m aviflow.runtime``: run this node's share of a job.

Its environment is a :class:`~aviflow.runtime.env.RuntimeEnv` (set by the local supervisor,
or by the Indexed Job's pod template, where ``JOB_COMPLETION_INDEX`` is the node's index).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from aviflow.runtime import _logcap
from aviflow.runtime._output import redirect_output
from aviflow.runtime.env import RuntimeEnv, RuntimeEnvError
from aviflow.runtime.launch import accelerate_argv, has_gpus, local_ranks, node_env, rank_program
from aviflow.store import RunDir, disk_full, read_json

HEARTBEAT_SECONDS = 2.0


def _heartbeat(run: RunDir, node: RuntimeEnv, state: str, **extra: object) -> None:
    beat = {
        "node": node.node_rank,
        "attempt": node.attempt,
        "pid": os.getpid(),
        "time": time.time(),
        "state": state,
        **extra,
    }
    try:
        run.write_heartbeat(node.node_rank, beat)
    except OSError as exc:  # a full run store: the job goes on; the next beat may land
        if not disk_full(exc):
            raise


def _say(text: str) -> None:
    """A line in the node's log, which may be on a full disk: never fails the node."""
    try:
        print(text, flush=True)
    except OSError:
        pass


def main() -> int:
    try:
        node = RuntimeEnv.from_env(os.environ)
    except RuntimeEnvError as exc:
        print(f"aviflow.runtime: {exc}", file=sys.stderr)
        return 2
    run = RunDir(node.run_dir)
    job = run.runtime_spec()
    manifest = read_json(run.manifest_path, {})
    if node.log_to_store:
        redirect_output(run.node_log(node.node_rank))
    program = rank_program(sys.executable, run, job, manifest.get("entrypoint"))
    config = manifest.get("accelerate_config")
    argv = accelerate_argv(
        sys.executable, node, job, program, run.code_dir / config if config else None
    )
    latest = run.checkpoints()
    print(
        f"=== attempt {node.attempt} node {node.node_rank}/{node.num_nodes} "
        f"main {node.main_addr}:{node.main_port} "
        f"latest checkpoint={latest[-1].step if latest else None} ===",
        flush=True,
    )
    _heartbeat(run, node, "starting")
    env = node_env(os.environ, node, job, gpus=has_gpus(node))
    # a writable working directory in the job's data part (its code is mounted read-only;
    # the script's own directory is on sys.path for its imports)
    run.work_dir.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(argv, env=env, cwd=run.work_dir)
    # this node's ranks' logs stay within their share of the job's log cap
    logcap = _logcap.start(run, node, local_ranks(node, job))

    def forward(signum: int, _frame: object) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            _heartbeat(run, node, "running", child_pid=child.pid)

    beater = threading.Thread(target=beat, name="aviflow-heartbeat", daemon=True)
    beater.start()
    _heartbeat(run, node, "running", child_pid=child.pid)
    code = child.wait()
    stop.set()
    beater.join()  # so that no "running" beat lands after (over) the "exited" one
    if logcap is not None:
        logcap.finish()  # before the node is seen to end: its logs are then within the cap
    _heartbeat(run, node, "exited", exit_code=code)
    _say(f"=== node {node.node_rank} exited with {code} ===")
    return 0 if code == 0 else (code if code > 0 else 128 - code)


if __name__ == "__main__":
    sys.exit(main())
