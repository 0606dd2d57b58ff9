"""Pure builders: (spec, this node's RuntimeEnv) -> the ``accelerate launch`` argv and the
environment of the launcher and its ranks.

Nothing here starts a process; :mod:`aviflow.runtime.__main__` runs what these return.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from aviflow.runtime.env import RuntimeEnv, without_runtime
from aviflow.spec import TrainJob
from aviflow.store import RunDir


def rank_program(python: str, run: RunDir, job: TrainJob, entrypoint: str | None) -> list[str]:
    """What every rank runs: the rank wrapper, then the user's script or command."""
    head = [python, "-m", "aviflow.runtime.rank"]
    if entrypoint is not None:
        return [*head, "--script", str(run.code_dir / entrypoint)]
    assert job.spec.command is not None
    return [*head, "--exec", "--", *job.spec.command]


def accelerate_argv(
    python: str,
    node: RuntimeEnv,
    job: TrainJob,
    program: list[str],
    accelerate_config: Path | None,
) -> list[str]:
    """``python -m accelerate.commands.launch ...`` for one node."""
    total = node.num_nodes * job.spec.gpus_per_node
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
    base: Mapping[str, str], node: RuntimeEnv, job: TrainJob, gpus: bool
) -> dict[str, str]:
    """The environment of the launcher and, through it, of every rank on this node: ``base``
    (runtime variables it may carry are replaced), the spec's ``env``, this node's
    :class:`RuntimeEnv`, and ``ACCELERATE_USE_CPU`` on a node without GPUs."""
    env = without_runtime(base)
    env.pop("ACCELERATE_USE_CPU", None)
    env.update(job.spec.env)
    env.update(node.to_env())
    env["PYTHONUNBUFFERED"] = "1"
    if not gpus:
        env["ACCELERATE_USE_CPU"] = "true"
    return env


def local_ranks(node: RuntimeEnv, job: TrainJob) -> range:
    """The global ranks of this node's processes (``accelerate launch`` numbers a node's
    processes on from ``machine_rank x processes per machine``)."""
    per_node = job.spec.gpus_per_node
    return range(node.node_rank * per_node, (node.node_rank + 1) * per_node)


def has_gpus(node: RuntimeEnv, nvidia_device: Path = Path("/dev/nvidiactl")) -> bool:
    """Whether this node has NVIDIA GPUs (``AVIFLOW_DEVICE`` overrides), without torch."""
    if node.device:
        return node.device == "gpu"
    return nvidia_device.exists()
