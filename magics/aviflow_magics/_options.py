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
from dataclasses import dataclass, field
from typing import Any, NoReturn

from aviflow._flags import add_spec_flags, given, nonempty, spec_flags

RESUME_MODES = ("auto", "never")
# The magic's own flags; every other flag sets a TrainJob field (aviflow/spec_flags.json,
# derived from the spec model) and is a key of ``TrainOptions.spec_values`` when given.
OWN_FLAGS = ("--resume", "--spec", "--vars", "--out", "--dry-run", "--wait", "--backend")
# What a spec flag means here beyond the field's own description.
NOTES = {"--name": "Default: the spec's, else the notebook's name"}
_JOB_ID = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class OptionError(ValueError):
    """A bad ``%%aviflow_train`` option line; the message is one line for the notebook."""


@dataclass(frozen=True)
class TrainOptions:
    """The parsed option line. ``spec_values`` holds the spec flags given, by dest (see
    ``aviflow/spec_flags.json``); one not given is absent, so the spec file or the model's
    default applies. A spec flag also reads as an attribute: ``opts.nodes`` (None when not
    given), ``opts.env`` ({}), ``opts.secrets`` (())."""

    spec_values: dict[str, Any] = field(default_factory=dict)
    resume: str = "never"
    spec: str | None = None
    vars: tuple[str, ...] = ()
    out: str | None = None
    dry_run: bool = False
    wait: bool = False
    backend: str | None = None

    def __getattr__(self, name: str) -> Any:
        row = _rows().get(name) if name != "spec_values" else None
        if row is None:
            raise AttributeError(name)
        empty = {"map": {}, "list": ()}.get(row["kind"])
        return self.spec_values.get(name, empty)


def _rows() -> dict[str, dict[str, Any]]:
    return {row["dest"]: row for row in spec_flags()}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionError(message)


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
    add_spec_flags(p, notes=NOTES)
    a = p.add_argument
    a(
        "--resume",
        type=_resume,
        default="never",
        metavar="{auto,never,JOB_ID}",
        help="start from a checkpoint: auto = the latest of this cell's or name's previous "
        "jobs, JOB_ID = that job's latest; default never. e.g. --resume auto",
    )
    a(
        "--spec",
        type=nonempty,
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
        type=nonempty,
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
    try:
        values = given(ns)
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    return TrainOptions(
        spec_values=values,
        resume=ns.resume,
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
