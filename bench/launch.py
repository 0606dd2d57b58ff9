"""Launch overhead and in-training overhead of Aviflow, against baselines from the same run.

1. Submit -> first logged training step: ``aviflow.submit`` on the local backend vs. a bare
   ``accelerate launch`` of the same script with the same layout (2 nodes x 2 processes,
   MULTI_CPU here), alternated round by round. Target: ratio <= 1.10.
2. Mean step time with the aviflow tracker + checkpoint helpers on vs. off, both under a
   bare ``accelerate launch``, alternated. Target: ratio <= 1.02.

    .venv/bin/python bench/launch.py [--rounds 3] [--steps 400] [--ckpt-every 200]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.runtime.env import RuntimeEnv

SCRIPT = Path(__file__).with_name("_train_step.py")
NODES, PROCS = 2, 2


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, timeout: float = 600) -> float:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)
    return float(path.read_text())


def bare_launch(env_extra: dict[str, str], run_dir: Path) -> list[subprocess.Popen[bytes]]:
    port = _port()
    runtime = RuntimeEnv(run_dir=run_dir).to_env()  # what the training-side API reads
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", **runtime, **env_extra}
    procs = []
    for rank in range(NODES):
        argv = [
            sys.executable,
            "-m",
            "accelerate.commands.launch",
            "--multi_gpu",
            "--mixed_precision",
            "no",
            "--dynamo_backend",
            "no",
            "--num_machines",
            str(NODES),
            "--machine_rank",
            str(rank),
            "--num_processes",
            str(NODES * PROCS),
            "--main_process_ip",
            "127.0.0.1",
            "--main_process_port",
            str(port),
            str(SCRIPT),
        ]
        procs.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
    return procs


def time_bare(tmp: Path) -> float:
    mark = tmp / f"bare-{time.time_ns()}"
    t0 = time.time()
    procs = bare_launch({"BENCH_MARK": str(mark)}, tmp / "bare-run")
    first = _wait_for(mark) - t0
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("bare accelerate launch failed")
    return first


def time_aviflow(tmp: Path, backend: LocalBackend) -> float:
    mark = tmp / f"aviflow-{time.time_ns()}"
    spec = {
        "metadata": {"name": "bench-launch"},
        "spec": {
            "nodes": NODES,
            "gpusPerNode": PROCS,
            "scriptFile": str(SCRIPT),
            "env": {"BENCH_MARK": str(mark)},
        },
    }
    t0 = time.time()
    job = aviflow.submit(spec, backend=backend)
    first = _wait_for(mark) - t0
    if job.wait(timeout=600) != aviflow.JobState.SUCCEEDED:
        raise RuntimeError(job.logs(tail=40))
    return first


def step_time(tmp: Path, helpers: bool, steps: int, ckpt_every: int) -> float:
    out = tmp / f"steps-{helpers}-{time.time_ns()}.json"
    run_dir = tmp / f"steps-run-{time.time_ns()}"
    procs = bare_launch(
        {
            "BENCH_STEPS": str(steps),
            "BENCH_HELPERS": "1" if helpers else "0",
            "BENCH_CKPT_EVERY": str(ckpt_every),
            "BENCH_OUT": str(out),
        },
        run_dir,
    )
    if any(p.wait() != 0 for p in procs):
        raise RuntimeError("step benchmark failed")
    return json.loads(out.read_text())["mean_step_s"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--ckpt-every", type=int, default=200)
    ns = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aviflow-bench-") as d:
        tmp = Path(d)
        backend = LocalBackend(root=tmp / "runs", capacity=NODES * PROCS)
        bare, via = [], []
        for r in range(ns.rounds):
            bare.append(time_bare(tmp))
            via.append(time_aviflow(tmp, backend))
            print(
                f"round {r + 1}: submit->first step  bare {bare[-1]:.2f}s  aviflow {via[-1]:.2f}s",
                flush=True,
            )
        off, on = [], []
        for r in range(ns.rounds):
            off.append(step_time(tmp, False, ns.steps, ns.ckpt_every))
            on.append(step_time(tmp, True, ns.steps, ns.ckpt_every))
            print(
                f"round {r + 1}: mean step  helpers off {off[-1] * 1e3:.3f}ms  on {on[-1] * 1e3:.3f}ms",
                flush=True,
            )
    launch_ratio = statistics.median(via) / statistics.median(bare)
    step_ratio = statistics.median(on) / statistics.median(off)
    print(f"\nlayout: {NODES} nodes x {PROCS} processes (MULTI_CPU), {ns.rounds} alternated rounds")
    print(
        f"submit -> first step: aviflow/bare = {launch_ratio:.3f}  (target <= 1.10)  "
        f"[median {statistics.median(via):.2f}s vs {statistics.median(bare):.2f}s]"
    )
    print(
        f"step time, helpers on/off = {step_ratio:.3f}  (target <= 1.02)  "
        f"[checkpoint every {ns.ckpt_every} steps, {ns.steps} steps]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
