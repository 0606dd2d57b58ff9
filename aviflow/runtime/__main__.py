"""``python -m aviflow.runtime``: run this node's share of a job.

Environment (set by the local supervisor, or by the Indexed Job's pod template):
``AVIFLOW_RUN_DIR`` (required), ``JOB_COMPLETION_INDEX`` or ``AVIFLOW_NODE_RANK``,
``AVIFLOW_NUM_NODES``, ``AVIFLOW_MAIN_ADDR``, ``AVIFLOW_MAIN_PORT``, ``AVIFLOW_ATTEMPT``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from aviflow.bundle import MANIFEST
from aviflow.runtime._output import redirect_output
from aviflow.runtime.launch import (
    DEFAULT_MAIN_PORT,
    NodeInfo,
    accelerate_argv,
    has_gpus,
    node_env,
    rank_program,
)
from aviflow.store import RunDir, atomic_write, read_json

HEARTBEAT_SECONDS = 2.0


def node_rank_from_env(env: dict[str, str]) -> int:
    for key in ("JOB_COMPLETION_INDEX", "AVIFLOW_NODE_RANK"):
        if env.get(key, "") != "":
            return int(env[key])
    raise SystemExit("aviflow.runtime: set JOB_COMPLETION_INDEX or AVIFLOW_NODE_RANK")


def _heartbeat(run: RunDir, node: NodeInfo, state: str, **extra: object) -> None:
    beat = {
        "node": node.node_rank,
        "attempt": node.attempt,
        "pid": os.getpid(),
        "time": time.time(),
        "state": state,
        **extra,
    }
    atomic_write(run.heartbeats_dir / f"node-{node.node_rank}.json", json.dumps(beat))


def main() -> int:
    env = dict(os.environ)
    run_dir = Path(
        env.get("AVIFLOW_RUN_DIR") or sys.exit("aviflow.runtime: AVIFLOW_RUN_DIR is not set")
    )
    run = RunDir(run_dir)
    job = run.spec()
    manifest = read_json(run.code_dir / MANIFEST, {})
    node = NodeInfo(
        run_dir=run_dir,
        node_rank=node_rank_from_env(env),
        num_nodes=int(env.get("AVIFLOW_NUM_NODES", job.spec.nodes)),
        procs_per_node=job.spec.gpus_per_node,
        main_addr=env.get("AVIFLOW_MAIN_ADDR", "127.0.0.1"),
        main_port=int(env.get("AVIFLOW_MAIN_PORT", DEFAULT_MAIN_PORT)),
        attempt=int(env.get("AVIFLOW_ATTEMPT", "1")),
        use_cpu=not has_gpus(),
    )
    if env.get("AVIFLOW_LOG_TO_STORE", "1") == "1":
        redirect_output(run.node_log(node.node_rank))
    checkpoints = run.checkpoints()
    resume_from = checkpoints[-1]["path"] if checkpoints and node.attempt > 1 else None
    program = rank_program(sys.executable, run_dir, job, manifest.get("entrypoint"))
    config = manifest.get("accelerate_config")
    argv = accelerate_argv(
        sys.executable, node, job, program, run.code_dir / config if config else None
    )
    print(
        f"=== attempt {node.attempt} node {node.node_rank}/{node.num_nodes} "
        f"main {node.main_addr}:{node.main_port} resume_from={resume_from} ===",
        flush=True,
    )
    _heartbeat(run, node, "starting")
    child = subprocess.Popen(argv, env=node_env(env, node, job, resume_from), cwd=run.code_dir)

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
    _heartbeat(run, node, "exited", exit_code=code)
    print(f"=== node {node.node_rank} exited with {code} ===", flush=True)
    return 0 if code == 0 else (code if code > 0 else 128 - code)


if __name__ == "__main__":
    sys.exit(main())
