"""The options of ``%%aviflow_train``: a strict argparse parser, pure (no I/O).

>>> opts = parse_train_options("--nodes 2 --gpus-per-node 2 --env LR=3e-4 --wait")
>>> (opts.nodes, opts.gpus_per_node, opts.env, opts.wait)
(2, 2, {'LR': '3e-4'}, True)

Every bad option raises :class:`OptionError` with one line that names the option.
"""

from __future__ import annotations

import argparse
import keyword
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NoReturn

from aviflow._specdefs import FSDP_SHARDING, GPUS_PER_HGX_NODE, MIXED_PRECISION, STRATEGIES

RESUME_MODES = ("auto", "never")
# Options that set a TrainJob ``spec`` field of the same (Python) name; the spec model gives
# their YAML keys (``gpus_per_node`` -> ``gpusPerNode``) and checks their values.
SPEC_FIELDS = (
    "nodes", "gpus_per_node", "queue", "image", "time_limit", "hang_timeout", "max_restarts",
    "runtime",
)  # fmt: skip
ACCELERATE_FIELDS = {
    "mixed_precision": "mixed_precision",
    "strategy": "strategy",
    "accelerate_config": "config_file",
}
# Options that set a ``spec.accelerate.fsdp`` field (FsdpSpec), option name -> field name.
FSDP_FIELDS = {
    "fsdp_sharding": "sharding",
    "fsdp_offload": "offload",
    "activation_checkpointing": "activation_checkpointing",
}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class OptionError(ValueError):
    """A bad ``%%aviflow_train`` option line; the message is one line for the notebook."""


@dataclass(frozen=True)
class TrainOptions:
    """The parsed option line; ``None`` means "not given" (the spec file or default applies)."""

    nodes: int | None = None
    gpus_per_node: int | None = None
    queue: str | None = None
    name: str | None = None
    image: str | None = None
    runtime: str | None = None
    time_limit: str | None = None
    hang_timeout: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    secrets: tuple[str, ...] = ()
    max_restarts: int | None = None
    resume: str = "never"
    mixed_precision: str | None = None
    strategy: str | None = None
    fsdp_sharding: str | None = None
    fsdp_offload: bool | None = None
    activation_checkpointing: bool | None = None
    accelerate_config: str | None = None
    spec: str | None = None
    vars: tuple[str, ...] = ()
    out: str | None = None
    dry_run: bool = False
    wait: bool = False
    backend: str | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionError(message)


def _positive(what: str, minimum: int = 1) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    convert.__name__ = what
    return convert


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    if not _ENV_NAME.match(key):
        raise argparse.ArgumentTypeError(f"{key!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return key, value


def _identifier(text: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text) or text.startswith("__"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a notebook variable name")
    return text


def _var_list(text: str) -> tuple[str, ...]:
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise argparse.ArgumentTypeError(
            f"expected comma-separated names like 'data,config', got {text!r}"
        )
    for n in names:
        _identifier(n)
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"a variable is named twice in {text!r}")
    return tuple(names)


def _resume(text: str) -> str:
    if text in RESUME_MODES or _JOB_ID.match(text):
        return text
    raise argparse.ArgumentTypeError(f"expected auto, never or a job id, got {text!r}")


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


EXAMPLES = """\
Examples:

  %%aviflow_train --nodes 2 --gpus-per-node 8 --queue research --time-limit 2h
  %%aviflow_train --spec train.yaml --nodes 4          (flags override the spec file)
  %%aviflow_train --env LR=3e-4 --env "NOTE=two words" --mixed-precision bf16
  %%aviflow_train --vars dataset,config --out job     (ship variables; bind the handle)
  %%aviflow_train --resume auto --max-restarts 2      (continue from this cell's last run)
  %%aviflow_train --resume tiny-3f9a1c2b              (start from that job's checkpoint)
  %%aviflow_train --strategy fsdp --fsdp-sharding grad-op --activation-checkpointing
  %%aviflow_train --accelerate-config fsdp.yaml --image registry.example.com/trainer:1.0
  %%aviflow_train --dry-run                           (show the spec and GPU-hours only)
  %%aviflow_train --wait --backend local              (block until the job finishes)

The cell body is the training script; it runs on every rank (`accelerate launch`).
Variables in the option line are expanded by IPython: --nodes {n_nodes}.
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser behind ``%%aviflow_train`` (and its ``?`` help)."""
    p = _Parser(
        prog="%%aviflow_train",
        description="Run the cell as a distributed training job and show its live panel.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        add_help=False,
        allow_abbrev=False,
        exit_on_error=False,
    )
    a = p.add_argument
    a(
        "--nodes",
        type=_positive("--nodes"),
        metavar="N",
        help="number of nodes (HGX machines), e.g. --nodes 2",
    )
    a(
        "--gpus-per-node",
        type=_positive("--gpus-per-node"),
        metavar="N",
        help=f"GPUs (processes) per node, 1-{GPUS_PER_HGX_NODE}, "
        f"e.g. --gpus-per-node {GPUS_PER_HGX_NODE}",
    )
    a("--queue", type=_nonempty, metavar="QUEUE", help="queue to submit to, e.g. --queue research")
    a(
        "--name",
        type=_nonempty,
        metavar="NAME",
        help="run name (default: the spec's, else the notebook's name), e.g. --name bert-base",
    )
    a(
        "--image",
        type=_nonempty,
        metavar="IMAGE",
        help="trainer image, e.g. --image registry.example.com/trainer:1.0",
    )
    a(
        "--runtime",
        type=_nonempty,
        metavar="NAME",
        help="the admin's training runtime for the pods (RDMA, NCCL settings, a model cache; "
        "default: the admin's default), e.g. --runtime infiniband",
    )
    a(
        "--time-limit",
        type=_nonempty,
        metavar="DURATION",
        help="stop the job after this long, e.g. --time-limit 90m or 2h",
    )
    a(
        "--hang-timeout",
        type=_nonempty,
        metavar="DURATION",
        help="report the job as hung (with each rank's stacks) and restart it after this long "
        "without progress, e.g. --hang-timeout 10m (default 30m)",
    )
    a(
        "--env",
        type=_env_pair,
        action="append",
        default=[],
        metavar="K=V",
        help="environment variable for every rank, repeatable, e.g. --env LR=3e-4",
    )
    a(
        "--secret",
        type=_nonempty,
        action="append",
        default=[],
        metavar="NAME",
        help="a Secret of your team's namespace (Kubernetes): its keys become environment "
        "variables of every rank, repeatable, e.g. --secret hf-token",
    )
    a(
        "--max-restarts",
        type=_positive("--max-restarts", 0),
        metavar="N",
        help="restart all ranks from the latest checkpoint up to N times, e.g. --max-restarts 2",
    )
    a(
        "--resume",
        type=_resume,
        default="never",
        metavar="{auto,never,JOB_ID}",
        help="start from a checkpoint: auto = the latest of this cell's or name's previous "
        "jobs, JOB_ID = that job's latest; default never. e.g. --resume auto",
    )
    a(
        "--mixed-precision",
        choices=MIXED_PRECISION,
        help="accelerate mixed precision, e.g. --mixed-precision bf16",
    )
    a(
        "--strategy",
        choices=STRATEGIES,
        help="how the model is spread over the ranks: ddp (a replica each, the default) or "
        "fsdp (sharded), e.g. --strategy fsdp",
    )
    a(
        "--fsdp-sharding",
        choices=FSDP_SHARDING,
        help="with --strategy fsdp: full (reshard after forward, least memory) or grad-op, "
        "e.g. --fsdp-sharding grad-op",
    )
    a(
        "--fsdp-offload",
        action="store_const",
        const=True,
        help="with --strategy fsdp: keep parameters and optimizer state in CPU memory, "
        "e.g. --fsdp-offload",
    )
    a(
        "--activation-checkpointing",
        action="store_const",
        const=True,
        help="with --strategy fsdp: recompute each layer's activations in the backward pass, "
        "e.g. --activation-checkpointing",
    )
    a(
        "--accelerate-config",
        type=_nonempty,
        metavar="FILE",
        help="an `accelerate config` YAML (FSDP, DeepSpeed), e.g. --accelerate-config fsdp.yaml",
    )
    a(
        "--spec",
        type=_nonempty,
        metavar="FILE",
        help="TrainJob YAML to take defaults from; flags override, the cell is the script. "
        "e.g. --spec train.yaml",
    )
    a(
        "--vars",
        type=_var_list,
        metavar="A,B",
        help="notebook variables to ship (cloudpickle); they are globals in the script. "
        "e.g. --vars dataset,config",
    )
    a(
        "--out",
        type=_identifier,
        metavar="NAME",
        help="bind the Job handle to this notebook variable, e.g. --out job",
    )
    a(
        "--dry-run",
        action="store_true",
        help="show the resolved spec and the GPU-hours requested; submit nothing",
    )
    a("--wait", action="store_true", help="show the panel and block until the job finishes")
    a(
        "--backend",
        type=_nonempty,
        metavar="NAME",
        help="registered backend to submit to (default: $AVIFLOW_BACKEND or local), e.g. --backend local",
    )
    return p


def parse_train_options(line: str) -> TrainOptions:
    """Parse the ``%%aviflow_train`` line. Raises :class:`OptionError`."""
    try:
        argv = shlex.split(line, posix=True)
    except ValueError as exc:
        raise OptionError(f"cannot split the option line: {exc}") from None
    try:
        ns, extra = build_parser().parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise OptionError(str(exc)) from None
    if extra:
        unknown = extra[0]
        hint = ""
        if unknown.startswith("-"):
            import difflib

            known = [o for a in build_parser()._actions for o in a.option_strings]
            close = difflib.get_close_matches(unknown.split("=")[0], known, n=1, cutoff=0.7)
            hint = f"; did you mean {close[0]}?" if close else ""
        raise OptionError(f"unrecognized argument {unknown!r}{hint}")
    env: dict[str, str] = {}
    for key, value in ns.env:
        if key in env:
            raise OptionError(f"argument --env: {key} is given twice")
        env[key] = value
    return TrainOptions(
        nodes=ns.nodes,
        gpus_per_node=ns.gpus_per_node,
        queue=ns.queue,
        name=ns.name,
        image=ns.image,
        runtime=ns.runtime,
        time_limit=ns.time_limit,
        hang_timeout=ns.hang_timeout,
        env=env,
        secrets=tuple(dict.fromkeys(ns.secret)),
        max_restarts=ns.max_restarts,
        resume=ns.resume,
        mixed_precision=ns.mixed_precision,
        strategy=ns.strategy,
        fsdp_sharding=ns.fsdp_sharding,
        fsdp_offload=ns.fsdp_offload,
        activation_checkpointing=ns.activation_checkpointing,
        accelerate_config=ns.accelerate_config,
        spec=ns.spec,
        vars=ns.vars or (),
        out=ns.out,
        dry_run=ns.dry_run,
        wait=ns.wait,
        backend=ns.backend,
    )


def help_text() -> str:
    """The full ``%%aviflow_train?`` text: usage, every option with an example, examples."""
    return build_parser().format_help()
