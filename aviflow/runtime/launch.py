"""Pure builders: (spec, node facts) -> the ``accelerate launch`` argv and the environment.

Nothing here starts a process; :mod:`aviflow.runtime.__main__` runs what these return.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from aviflow.spec import TrainJob

DEFAULT_MAIN_PORT = 29500


@dataclass(frozen=True)
class NodeInfo:
    """Where this node sits in the job."""

    run_dir: Path
    node_rank: int
    num_nodes: int
    procs_per_node: int
    main_addr: str
    main_port: int
    attempt: int
    use_cpu: bool


def rank_program(python: str, run_dir: Path, job: TrainJob, entrypoint: str | None) -> list[str]:
    """What every rank runs: the rank wrapper, then the user's script or command."""
    head = [python, "-m", "aviflow.runtime.rank", "--run-dir", str(run_dir)]
    if entrypoint is not None:
        return [*head, "--script", str(run_dir / "code" / entrypoint)]
    assert job.spec.command is not None
    return [*head, "--exec", "--", *job.spec.command]


def accelerate_argv(
    python: str, node: NodeInfo, job: TrainJob, program: list[str], accelerate_config: Path | None
) -> list[str]:
    """``python -m accelerate.commands.launch ...`` for one node."""
    total = node.num_nodes * node.procs_per_node
    argv = [python, "-m", "accelerate.commands.launch"]
    if accelerate_config is not None:
        argv += ["--config_file", str(accelerate_config)]
        if job.spec.accelerate.mixed_precision != "no":
            argv += ["--mixed_precision", job.spec.accelerate.mixed_precision]
    else:
        if total > 1:
            argv.append("--multi_gpu")
        argv += ["--mixed_precision", job.spec.accelerate.mixed_precision, "--dynamo_backend", "no"]
    argv += [
        "--num_machines",
        str(node.num_nodes),
        "--machine_rank",
        str(node.node_rank),
        "--num_processes",
        str(total),
        "--main_process_ip",
        node.main_addr,
        "--main_process_port",
        str(node.main_port),
        "--no_python",
        *program,
    ]
    return argv


def node_env(
    base: dict[str, str], node: NodeInfo, job: TrainJob, resume_from: str | None
) -> dict[str, str]:
    """The environment of the launcher and, through it, of every rank on this node."""
    env = dict(base)
    env.update(job.spec.env)
    env.update(
        AVIFLOW_RUN_DIR=str(node.run_dir),
        AVIFLOW_NODE_RANK=str(node.node_rank),
        AVIFLOW_NUM_NODES=str(node.num_nodes),
        AVIFLOW_ATTEMPT=str(node.attempt),
        AVIFLOW_CHECKPOINT_DIR=str(node.run_dir / "checkpoints"),
        AVIFLOW_KEEP_LAST=str(job.spec.checkpoints.keep_last),
        PYTHONUNBUFFERED="1",
    )
    if resume_from:
        env["AVIFLOW_RESUME_FROM"] = resume_from
    else:
        env.pop("AVIFLOW_RESUME_FROM", None)
    if node.use_cpu:
        env["ACCELERATE_USE_CPU"] = "true"
    return env


def has_gpus() -> bool:
    """Whether this node has NVIDIA GPUs, without importing torch."""
    forced = os.environ.get("AVIFLOW_DEVICE")
    if forced:
        return forced == "gpu"
    return Path("/dev/nvidiactl").exists()
