"""The spec flags of ``%%aviflow_train`` and ``aviflow submit`` come from the spec model: the
committed table is the model's, and each row says what its field accepts."""

from __future__ import annotations

import argparse
import typing
from importlib.resources import files
from typing import Any

import pytest
from pydantic import BaseModel

from aviflow import _flags
from aviflow._model import inner_model
from aviflow.cli import build_parser
from aviflow.errors import SpecError
from aviflow.spec import TrainJob
from aviflow.spec_flags import SPEC_FLAGS, render

BASE: dict[str, Any] = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "flags"},
    "spec": {"command": ["true"]},
}


def test_the_committed_table_is_derived_from_the_spec_model() -> None:
    committed = files("aviflow").joinpath(_flags.TABLE).read_text(encoding="utf-8")
    assert committed == render(), "run: python -m aviflow.spec_flags > aviflow/spec_flags.json"


def _field(path: str) -> tuple[type[BaseModel], str]:
    model: type[BaseModel] = TrainJob
    *parents, name = path.split(".")
    for part in parents:
        inner = inner_model(model.model_fields[part].annotation)
        assert inner is not None
        model = inner
    return model, name


def _with(key: list[str], value: Any) -> dict[str, Any]:
    data: dict[str, Any] = {**BASE, "metadata": dict(BASE["metadata"]), "spec": dict(BASE["spec"])}
    node = data
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value
    if key[:3] == ["spec", "accelerate", "fsdp"]:
        data["spec"]["accelerate"]["strategy"] = "fsdp"
    return data


@pytest.mark.parametrize("flag", SPEC_FLAGS, ids=lambda f: f.flag)
def test_each_row_says_what_its_field_accepts(flag: Any) -> None:
    """The row's key, help, choices, limits and default are the field's: the model accepts
    each choice and the limits, refuses one past them, and has the row's default."""
    row = next(r for r in _flags.spec_flags() if r["flag"] == flag.flag)
    model, name = _field(flag.path)
    info = model.model_fields[name]
    assert row["key"][-1] == (info.alias or name)
    assert row["description"] == info.description and row["description"]
    annotation = info.annotation
    if typing.get_origin(annotation) is not typing.Literal:  # X | None: X
        annotation = next(
            a for a in (*typing.get_args(annotation), annotation) if a is not type(None)
        )
    if typing.get_origin(annotation) is typing.Literal:
        assert row["choices"] == list(typing.get_args(annotation))
        for choice in row["choices"]:
            TrainJob.from_dict(_with(row["key"], choice))
    else:
        assert "choices" not in row
    if "minimum" in row:
        for ok in (row["minimum"], row["maximum"]):
            TrainJob.from_dict(_with(row["key"], ok))
        for bad in (row["minimum"] - 1, row["maximum"] + 1):
            with pytest.raises(SpecError):
                TrainJob.from_dict(_with(row["key"], bad))
    if row["kind"] == "bool" or info.is_required() or info.default_factory or info.default is None:
        assert "default" not in row or row["kind"] == "bool"
    else:
        assert row["default"] == info.default
    job = TrainJob.from_dict(_with(row["key"], _value(row)))
    node: Any = job.to_dict()
    for part in row["key"]:
        node = node[part]
    assert node == _value(row)
    assert row["description"].rstrip(".") in _flags.help_of(row)


def _value(row: dict[str, Any]) -> Any:
    """The row's example as the field's value."""
    if row["kind"] == "bool":
        return True
    if row["kind"] == "int":
        return int(row["example"])
    if row["kind"] == "map":
        key, _, value = row["example"].partition("=")
        return {key: value}
    if row["kind"] == "list":
        return [row["example"]]
    return row["example"]


def test_flags_merge_into_a_spec_without_changing_it() -> None:
    ns = _flags.spec_flag_parser().parse_args(
        ["--env", "A=1", "--secret", "b", "--secret", "c", "--secret", "b", "--fsdp-offload"]
    )
    values = _flags.given(ns)
    assert values == {"env": {"A": "1"}, "secrets": ("b", "c"), "fsdp_offload": True}
    base = {"spec": {"env": {"A": "0", "Z": "9"}, "secrets": ["a", "b"], "accelerate": {}}}
    assert _flags.apply(base, values) == {
        "spec": {
            "env": {"A": "1", "Z": "9"},
            "secrets": ["a", "b", "c"],
            "accelerate": {"fsdp": {"offload": True}},
        }
    }
    assert base == {"spec": {"env": {"A": "0", "Z": "9"}, "secrets": ["a", "b"], "accelerate": {}}}
    # a value of the wrong type on the way stays, for the model to refuse
    wrong = {"spec": {"accelerate": "fsdp", "env": "A=1"}}
    assert _flags.apply(wrong, values) == {
        "spec": {"accelerate": "fsdp", "env": "A=1", "secrets": ["b", "c"]}
    }
    with pytest.raises(ValueError, match="argument --env: A is given twice"):
        _flags.given(argparse.Namespace(env=[("A", "1"), ("A", "2")]))
    with pytest.raises(KeyError, match="no spec flag --nope"):
        _flags.spec_flag_parser(["--nope"])


def test_aviflow_submit_takes_its_spec_flags_from_the_table() -> None:
    submit = build_parser()._subparsers._group_actions[0].choices["submit"]  # type: ignore[union-attr]
    actions = {a.option_strings[0]: a for a in submit._actions if a.option_strings}
    for row in _flags.spec_flags():
        if row["flag"] in ("--secret", "--runtime"):
            assert actions[row["flag"]].help == _flags.help_of(row, with_key=True)
            assert actions[row["flag"]].dest == row["dest"]
    assert "Sets spec.secrets." in str(actions["--secret"].help)
