"""How often a finished rank aborts at exit: through Aviflow vs. a bare ``accelerate launch``
of the same plain script, in one run.

The regression behind ``tests/core/test_rank_exit.py``: a gloo worker thread freeing the final
backward's last work while the interpreter finalizes ends a finished rank with ``terminate
called without an active exception`` (SIGABRT). Aviflow's rank wrapper leaves without
finalizing (``aviflow.runtime.rank``); a bare ``accelerate launch`` finalizes, so it is the
baseline that shows how often the race is lost on this machine: without it a count of zero
proves little. The suite runs fewer jobs with more ranks each; this runs the full count.
Target: no abort through Aviflow, with the baseline aborting at all (else the run had no power).

    .venv/bin/python bench/rank_exit.py [--jobs 16] [--nodes 2] [--procs 2]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.records import JobState

SCRIPT = Path(__file__).resolve().parents[1] / "tests" / "core" / "scripts" / "plain_exit.py"
ABORT = "terminate called"


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bare(nodes: int, procs: int) -> tuple[int, int]:
    """One bare ``accelerate launch`` job: (ranks that aborted, ranks)."""
    port = _port()
    env = {**os.environ, "ACCELERATE_USE_CPU": "true"}
    launchers = []
    for rank in range(nodes):
        argv = [
            sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu",
            "--mixed_precision", "no", "--dynamo_backend", "no",
            "--num_machines", str(nodes), "--machine_rank", str(rank),
            "--num_processes", str(nodes * procs), "--main_process_ip", "127.0.0.1",
            "--main_process_port", str(port), str(SCRIPT),
        ]  # fmt: skip
        launchers.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        )
    out = b"".join(p.communicate(timeout=900)[0] for p in launchers).decode(errors="replace")
    return out.count(ABORT), nodes * procs


def through_aviflow(backend: LocalBackend, nodes: int, procs: int, i: int) -> tuple[int, int]:
    """One job through the local backend: (ranks that aborted or failed, ranks)."""
    job = aviflow.submit(
        {
            "metadata": {"name": f"plain-exit-{i}"},
            "spec": {"nodes": nodes, "gpusPerNode": procs, "scriptFile": str(SCRIPT)},
        },
        backend=backend,
    )
    state = job.wait(timeout=900)
    aborted = sum(ABORT in job.logs(rank=r) for r in range(nodes * procs))
    if state is not JobState.SUCCEEDED and not aborted:
        raise RuntimeError(f"{job.id} ended {state}: {job.status_record().message}")
    return max(aborted, int(state is not JobState.SUCCEEDED)), nodes * procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=16)
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--procs", type=int, default=2)
    ns = ap.parse_args()
    totals = {"aviflow": [0, 0, 0], "bare": [0, 0, 0]}  # aborted ranks, ranks, jobs aborted
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="aviflow-bench-") as d:
        backend = LocalBackend(root=Path(d) / "runs", capacity=ns.nodes * ns.procs)
        for i in range(ns.jobs):  # alternated, so both see the same load
            for name, run in (
                ("bare", lambda: bare(ns.nodes, ns.procs)),
                ("aviflow", lambda i=i: through_aviflow(backend, ns.nodes, ns.procs, i)),
            ):
                aborted, ranks = run()
                totals[name][0] += aborted
                totals[name][1] += ranks
                totals[name][2] += bool(aborted)
            print(
                f"job {i + 1}/{ns.jobs}: aborted ranks so far  bare {totals['bare'][0]}  "
                f"aviflow {totals['aviflow'][0]}",
                flush=True,
            )
    print(f"\n{ns.jobs} jobs of {ns.nodes} x {ns.procs} each way, {time.monotonic() - t0:.0f} s")
    for name, (aborted, ranks, jobs) in totals.items():
        print(
            f"{name:>8}: {aborted} of {ranks} ranks aborted ({aborted / ranks:.1%}), "
            f"{jobs} of {ns.jobs} jobs"
        )
    bare_rate = totals["bare"][0] / totals["bare"][1]
    ours = totals["aviflow"][0] / totals["aviflow"][1]
    print(
        f"abort rate aviflow/bare = {ours / bare_rate:.3f} (target 0)"
        if bare_rate
        else "the baseline never aborted: this run could not have caught the bug"
    )
    return 0 if totals["aviflow"][0] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
