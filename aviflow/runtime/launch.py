"""Pure builders: (spec, this node's RuntimeEnv) -> the ``accelerate launch`` argv and the
environment of the launcher and its ranks.

Nothing here starts a process; :mod:`aviflow.runtime.__main__` runs what these return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from aviflow.runtime.env import RuntimeEnv, without_runtime
from aviflow.spec import AccelerateSpec, TrainJob
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
    accelerate = job.spec.accelerate
    argv = [python, "-m", "accelerate.commands.launch"]
    if accelerate_config is not None:
        argv += ["--config_file", str(accelerate_config)]
        if accelerate.mixed_precision != "no":
            argv += ["--mixed_precision", accelerate.mixed_precision]
    else:
        argv += strategy_args(accelerate, total)
        argv += ["--mixed_precision", accelerate.mixed_precision, "--dynamo_backend", "no"]
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


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _ddp_args(accelerate: AccelerateSpec, total: int) -> list[str]:
    return ["--multi_gpu"] if total > 1 else []


def _fsdp_args(accelerate: AccelerateSpec, total: int) -> list[str]:
    # FSDP2 (fully_shard), each transformer layer its own unit (the model's
    # ``_no_split_modules``), checkpoints as sharded state (torch Distributed Checkpoint).
    fsdp = accelerate.fsdp_options
    return [
        "--use_fsdp",
        "--fsdp_version", "2",
        "--fsdp_reshard_after_forward", _flag(fsdp.sharding == "full"),
        "--fsdp_offload_params", _flag(fsdp.offload),
        "--fsdp_activation_checkpointing", _flag(fsdp.activation_checkpointing),
        "--fsdp_auto_wrap_policy", "TRANSFORMER_BASED_WRAP",
        "--fsdp_state_dict_type", "SHARDED_STATE_DICT",
    ]  # fmt: skip


# Each strategy's ``accelerate launch`` arguments (a registry, not a ladder of ifs).
_STRATEGY_ARGS: dict[str, Callable[[AccelerateSpec, int], list[str]]] = {
    "ddp": _ddp_args,
    "fsdp": _fsdp_args,
}


def strategy_args(accelerate: AccelerateSpec, total: int) -> list[str]:
    """The ``accelerate launch`` arguments of ``spec.accelerate.strategy`` (default ddp) for
    ``total`` processes.

    On a node without GPUs accelerate takes the fsdp arguments' environment
    (``ACCELERATE_USE_FSDP``, ``FSDP_*``) to every rank but runs them as plain gloo processes
    (``DistributedType.MULTI_CPU``): a script then shards with torch's ``fully_shard`` itself,
    as :mod:`aviflow.examples.llm` does.
    """
    return _STRATEGY_ARGS[accelerate.strategy or "ddp"](accelerate, total)


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
