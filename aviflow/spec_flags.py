"""Command-line flags for TrainJob fields, derived from the spec model.

Only which fields have a flag is declared here (:data:`SPEC_FLAGS`: the flag, the field's
path, a metavar and an example); the rest of each flag (its key, value kind, choices, limits,
default and help) is read from the model's fields. ``%load_ext aviflow`` must not import
pydantic, so the result is committed as ``aviflow/spec_flags.json`` and a golden test keeps
it in step with the model (as the CRD is)::

    python -m aviflow.spec_flags > aviflow/spec_flags.json

:mod:`aviflow._flags` turns the table into ``argparse`` options for ``%%aviflow_train`` and
``aviflow submit``.

>>> row = next(r for r in table() if r["flag"] == "--gpus-per-node")
>>> (row["key"], row["kind"], row["minimum"], row["maximum"], row["default"])
(['spec', 'gpusPerNode'], 'int', 1, 8, 1)
"""

from __future__ import annotations

import json
import sys
from typing import Any, NamedTuple

from pydantic import BaseModel

from aviflow._model import inner_model
from aviflow.spec import TrainJob


class SpecFlag(NamedTuple):
    """A flag for the field at ``path`` (Python names from :class:`~aviflow.spec.TrainJob`)."""

    flag: str
    path: str
    metavar: str | None
    example: str | None
    dest: str | None = None  # default: the flag's name with '_' for '-'


# The flags, in the order help shows them. A bool flag takes no value (its example is None).
SPEC_FLAGS: tuple[SpecFlag, ...] = (
    SpecFlag("--nodes", "spec.nodes", "N", "2"),
    SpecFlag("--gpus-per-node", "spec.gpus_per_node", "N", "8"),
    SpecFlag("--queue", "spec.queue", "QUEUE", "research"),
    SpecFlag("--name", "metadata.name", "NAME", "bert-base"),
    SpecFlag("--image", "spec.image", "IMAGE", "registry.example.com/trainer:1.0"),
    SpecFlag("--runtime", "spec.runtime", "NAME", "infiniband"),
    SpecFlag("--time-limit", "spec.time_limit", "DURATION", "90m"),
    SpecFlag("--hang-timeout", "spec.hang_timeout", "DURATION", "10m"),
    SpecFlag("--env", "spec.env", "K=V", "LR=3e-4"),
    SpecFlag("--secret", "spec.secrets", "NAME", "hf-token", dest="secrets"),
    SpecFlag("--max-restarts", "spec.max_restarts", "N", "2"),
    SpecFlag("--mixed-precision", "spec.accelerate.mixed_precision", None, "bf16"),
    SpecFlag("--strategy", "spec.accelerate.strategy", None, "fsdp"),
    SpecFlag("--fsdp-sharding", "spec.accelerate.fsdp.sharding", None, "grad-op"),
    SpecFlag("--fsdp-offload", "spec.accelerate.fsdp.offload", None, None),
    SpecFlag(
        "--activation-checkpointing", "spec.accelerate.fsdp.activation_checkpointing", None, None
    ),
    SpecFlag("--accelerate-config", "spec.accelerate.config_file", "FILE", "fsdp.yaml"),
)


def _resolve(path: str) -> tuple[type[BaseModel], str, list[str], str]:
    """The model holding the field at ``path``, the field's name, the keys (aliases) and
    the description of the field holding that model (below ``spec``; else "")."""
    model: type[BaseModel] = TrainJob
    keys: list[str] = []
    within = ""
    *parents, name = path.split(".")
    for depth, part in enumerate(parents):
        info = model.model_fields[part]
        within = (info.description or "") if depth > 0 else ""
        keys.append(info.alias or part)
        inner = inner_model(info.annotation)
        if inner is None:
            raise ValueError(f"{path}: {part} is not a model")
        model = inner
    info = model.model_fields[name]
    return model, name, [*keys, info.alias or name], within


def _plain(node: dict[str, Any]) -> dict[str, Any]:
    """``node`` without its ``null`` alternative (optional fields)."""
    options = [o for o in node.get("anyOf", []) if o.get("type") != "null"]
    if len(options) == 1:
        return {**{k: v for k, v in node.items() if k != "anyOf"}, **options[0]}
    return node


def _kind(node: dict[str, Any]) -> str:
    if "enum" in node:
        return "choice"
    kinds = {"integer": "int", "string": "str", "boolean": "bool", "object": "map", "array": "list"}
    kind = kinds.get(node.get("type", ""))
    if kind is None:
        raise ValueError(f"no flag for a field of schema {node}")
    return kind


def row(flag: SpecFlag) -> dict[str, Any]:
    """One flag's table row, from the model's field."""
    model, name, keys, within = _resolve(flag.path)
    schema = model.model_json_schema(by_alias=True)
    node = _plain(schema["properties"][keys[-1]])
    kind = _kind(node)
    if (kind == "bool") != (flag.example is None):
        raise ValueError(f"{flag.flag}: a bool flag has no example, any other flag one")
    out: dict[str, Any] = {
        "flag": flag.flag,
        "dest": flag.dest or flag.flag.removeprefix("--").replace("-", "_"),
        "key": keys,
        "kind": kind,
        "metavar": flag.metavar,
        "example": flag.example,
        "description": node.get("description", ""),
    }
    if within:
        out["within"] = within
    if "enum" in node:
        out["choices"] = list(node["enum"])
    for limit in ("minimum", "maximum"):
        if limit in node:
            out[limit] = node[limit]
    info = model.model_fields[name]
    if not info.is_required() and info.default_factory is None and info.default is not None:
        out["default"] = info.default
    return out


def table() -> list[dict[str, Any]]:
    """Every flag's row, in :data:`SPEC_FLAGS` order."""
    return [row(f) for f in SPEC_FLAGS]


def render() -> str:
    """The table as committed in ``aviflow/spec_flags.json``."""
    return json.dumps(table(), indent=1) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
