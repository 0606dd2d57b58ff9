"""``argparse`` options for TrainJob fields, from the table derived from the spec model.

Light (no pydantic): ``%load_ext aviflow`` builds ``%%aviflow_train``'s help from it. The
table is :mod:`aviflow.spec_flags`' output, committed as ``aviflow/spec_flags.json``. The
parser checks what a flag can check alone (an integer, at least the field's minimum, one of
its choices, a ``K=V`` pair); the spec model checks the rest when the job is built, with its
own messages.

>>> values = given(spec_flag_parser().parse_args(["--nodes", "2", "--env", "A=1"]))
>>> values
{'nodes': 2, 'env': {'A': '1'}}
>>> apply({"spec": {"env": {"B": "2"}}}, values)
{'spec': {'env': {'B': '2', 'A': '1'}, 'nodes': 2}}
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable, Iterable, Mapping
from functools import cache
from importlib.resources import files
from typing import Any

TABLE = "spec_flags.json"
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@cache
def spec_flags() -> tuple[dict[str, Any], ...]:
    """The rows of ``aviflow/spec_flags.json`` (see :func:`aviflow.spec_flags.row`)."""
    rows = json.loads(files("aviflow").joinpath(TABLE).read_text(encoding="utf-8"))
    return tuple(rows)


def _integer(flag: str, minimum: int | None) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    convert.__name__ = flag
    return convert


def _rows(flags: Iterable[str] | None) -> list[dict[str, Any]]:
    """The rows of ``flags`` (all when None), in the table's order; an unknown flag is a
    programming error."""
    if flags is None:
        return list(spec_flags())
    wanted = set(flags)
    unknown = wanted - {row["flag"] for row in spec_flags()}
    if unknown:
        raise KeyError(f"no spec flag {', '.join(sorted(unknown))}")
    return [row for row in spec_flags() if row["flag"] in wanted]


def nonempty(text: str) -> str:
    """An argparse type: any text but blank."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def env_pair(text: str) -> tuple[str, str]:
    """An argparse type: ``K=V`` with a variable name for K."""
    key, sep, value = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected K=V, got {text!r}")
    if not _ENV_NAME.match(key):
        raise argparse.ArgumentTypeError(f"{key!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
    return key, value


def help_of(row: Mapping[str, Any], note: str | None = None, with_key: bool = False) -> str:
    """A flag's help: the field's description (after that of the object it is in, if any),
    ``note``, the field's key (``with_key``), its limits and default, and an example."""
    sentences = [str(row.get("within", "")), str(row["description"]), note or ""]
    if with_key:
        sentences.append(f"Sets {'.'.join(row['key'])}")
    extras = []
    if "minimum" in row and "maximum" in row:
        extras.append(f"{row['minimum']} to {row['maximum']}")
    if row["kind"] in ("map", "list"):
        extras.append("repeatable")
    if "default" in row and row["kind"] != "bool":
        extras.append(f"default: {row['default']}")
    if extras:
        text = ", ".join(extras)
        sentences.append(text[:1].upper() + text[1:])
    example = row["flag"] if row["example"] is None else f"{row['flag']} {row['example']}"
    text = " ".join(_sentence(s) for s in sentences if s)
    return f"{text} e.g. {example}"


def _sentence(text: str) -> str:
    return text.strip().rstrip(".") + "."


def add_spec_flags(
    parser: argparse.ArgumentParser,
    flags: Iterable[str] | None = None,
    notes: Mapping[str, str] | None = None,
    with_key: bool = False,
) -> None:
    """Add the flags (all, or those named in ``flags``, in the table's order) to ``parser``;
    ``notes`` adds a caller's words to a flag's help (e.g. its default there), ``with_key``
    the key of the field it sets."""
    for row in _rows(flags):
        kind = row["kind"]
        options: dict[str, Any] = {
            "dest": row["dest"],
            "help": help_of(row, (notes or {}).get(row["flag"]), with_key),
        }
        if kind == "bool":
            options.update(action="store_const", const=True)
        elif kind == "choice":
            options["choices"] = tuple(row["choices"])
        else:
            options["metavar"] = row["metavar"]
        if kind == "int":
            options["type"] = _integer(row["flag"], row.get("minimum"))
        elif kind == "str":
            options["type"] = nonempty
        elif kind in ("map", "list"):
            options.update(
                type=env_pair if kind == "map" else nonempty, action="append", default=[]
            )
        parser.add_argument(row["flag"], **options)


def spec_flag_parser(flags: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """A parser of the spec flags alone."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_spec_flags(parser, flags)
    return parser


def given(ns: argparse.Namespace, flags: Iterable[str] | None = None) -> dict[str, Any]:
    """The spec flags (all, or those named in ``flags``) given in ``ns``, by dest: ``map``
    flags as a dict (a key given twice is an error), ``list`` flags as a tuple without
    repeats."""
    out: dict[str, Any] = {}
    for row in _rows(flags):
        value = getattr(ns, row["dest"], None)
        if value is None or value == []:
            continue
        if row["kind"] == "map":
            pairs: dict[str, str] = {}
            for key, item in value:
                if key in pairs:
                    raise ValueError(f"argument {row['flag']}: {key} is given twice")
                pairs[key] = item
            value = pairs
        elif row["kind"] == "list":
            value = tuple(dict.fromkeys(value))
        out[row["dest"]] = value
    return out


def apply(data: Mapping[str, Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` (a TrainJob mapping) with the flags' ``values`` (by dest) set at their keys:
    a map is merged into the one there, a list added to it without repeats; ``data`` itself
    is not changed. Where ``data`` has a value of the wrong type on the way, it stays, for
    the model to refuse."""
    out = dict(data)
    for row in spec_flags():
        if row["dest"] not in values:
            continue
        value = values[row["dest"]]
        *parents, last = row["key"]
        node = _container(out, parents)
        if node is None:
            continue  # a value of the wrong type on the way: the model refuses it
        old = node.get(last)
        if row["kind"] == "map":
            if old is not None and not isinstance(old, Mapping):
                continue
            value = {**(old or {}), **value}
        elif row["kind"] == "list":
            if old is not None and not isinstance(old, list):
                continue
            value = list(dict.fromkeys([*(old or []), *value]))
        node[last] = value
    return out


def _container(data: dict[str, Any], keys: list[str]) -> dict[str, Any] | None:
    """The mapping at ``keys`` in ``data``, each on the way copied (or made where absent or
    null); None where one on the way is not a mapping."""
    node = data
    for key in keys:
        child = node.get(key)
        if child is None:
            child = {}
        elif not isinstance(child, Mapping):
            return None
        node[key] = dict(child)
        node = node[key]
    return node
