"""What the TrainJob tests on the test control plane share: the tiny regression job, and the
process of one of its ranks or of a node's launcher (the test cluster's pods are processes
of this machine)."""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from typing import Any

from aviflow.runtime.env import COMPLETION_INDEX, NODE_RANK, RUN_DIR
from aviflow.spec import TrainJob

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()

# How long a test waits for a torch job's step, checkpoint or end before it calls it a hang.
# Alone on a usual machine a tiny job takes 10-40 s; on CI's slower machines, beside the
# other worker's 2 x 8 jobs (tests/core/test_rank_exit.py), several minutes: waits of 180 s
# and 240 s ran out there while the job trained on. A hang detector costs nothing while the
# tests pass, so every such wait is this one, under a test timeout with room for two.
TORCH_WAIT = 480.0
TORCH_TEST_TIMEOUT = 1200


def tiny(name: str, queue: str = "default", nodes: int = 2, gpus: int = 2, **spec: Any) -> TrainJob:
    env = {"TINY_STEPS": "30", "TINY_CKPT_EVERY": "10", **spec.pop("env", {})}
    return TrainJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "queue": queue,
                "nodes": nodes,
                "gpusPerNode": gpus,
                "script": TINY,
                "env": env,
                **spec,
            },
        }
    )


LAUNCHER = "accelerate.commands.launch"  # in the argv of a node's launcher (and of no rank)


def _processes(run_dir: str) -> Iterator[tuple[Any, list[str], dict[str, str]]]:
    """Every process running the rank wrapper (a rank, or a launcher that carries it in its
    argv) of the job whose pods mount ``run_dir``: (process, argv, environment)."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info["cmdline"] or []
            if "aviflow.runtime.rank" not in cmd:
                continue
            env = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if env.get(RUN_DIR) == run_dir:
            yield proc, cmd, env


def rank_process(run_dir: str, rank: int) -> Any:
    """The process of ``rank`` of the job whose pods mount ``run_dir`` (the test cluster's
    pods are processes of this machine), never its node's launcher; None if none yet."""
    for proc, cmd, env in _processes(run_dir):
        # (accelerate sets no RANK for a single process: rank 0, as aviflow's process_rank)
        if LAUNCHER not in cmd and (env.get("RANK") or "0") == str(rank):
            return proc
    return None


def launcher_process(run_dir: str, node: int = 0) -> Any:
    """Node ``node``'s ``accelerate launch`` of the job whose pods mount ``run_dir``: its
    pod's training process, whose death by SIGKILL is the node's exit 137 (a rank killed
    instead leaves its launcher to exit 1); None if none yet."""
    for proc, cmd, env in _processes(run_dir):
        index = env.get(COMPLETION_INDEX) or env.get(NODE_RANK) or "0"
        if LAUNCHER in cmd and index == str(node):
            return proc
    return None
