"""The TrainJob spec: round trips, strict validation, clear messages."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from aviflow._units import format_duration, parse_duration, parse_quantity
from aviflow.errors import SpecError
from aviflow.spec import TrainJob

FIXTURES = Path(__file__).parent / "specs"

BASE = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "tiny"},
    "spec": {"nodes": 2, "gpusPerNode": 2, "script": "print('hi')"},
}


def with_spec(**changes):
    data = copy.deepcopy(BASE)
    for key, value in changes.items():
        if value is None:
            data["spec"].pop(key, None)
        else:
            data["spec"][key] = value
    return data


def test_v1_fixture_loads_and_round_trips():
    job = TrainJob.load(FIXTURES / "v1_full.yaml")
    assert job.spec.total_gpus == 32
    assert job.spec.time_limit_seconds == 4 * 3600
    assert job.spec.hang_timeout_seconds == 20 * 60
    assert job.spec.accelerate.mixed_precision == "bf16"
    assert job.spec.accelerate.config_file == "fsdp.yaml"
    assert job.spec.checkpoints.keep_last == 5
    assert TrainJob.from_yaml(job.to_yaml()) == job
    assert TrainJob.from_json(job.to_json()) == job
    original = yaml.safe_load((FIXTURES / "v1_full.yaml").read_text())
    assert job.to_dict() == original


def test_defaults_are_explicit_after_round_trip():
    job = TrainJob.from_dict(BASE)
    assert job.to_dict()["spec"] == {
        "queue": "default",
        "nodes": 2,
        "gpusPerNode": 2,
        "script": "print('hi')",
        "env": {},
        "accelerate": {"mixedPrecision": "no"},
        "checkpoints": {"keepLast": 3},
        "maxRestarts": 0,
        "hangTimeout": "30m",
        "secrets": [],
    }
    assert json.loads(job.to_json())["apiVersion"] == "aviflow.dev/v1"


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (with_spec(gpuPerNode=2), "spec.gpuPerNode: unknown key; did you mean 'gpusPerNode'?"),
        (
            with_spec(secrets=["HF_TOKEN"]),
            "spec.secrets: 'HF_TOKEN' is not a Secret's name; use lowercase letters, digits, '-' "
            "and '.' (at most 253)",
        ),
        (with_spec(secrets=["a", "a"]), "spec.secrets: a named more than once"),
        (
            with_spec(hangTimeout="0s"),
            "spec.hangTimeout: '0s' is out of range; give 1s to 30d, e.g. '30m'",
        ),
        (
            with_spec(hangTimeout=30),
            "spec.hangTimeout: Input should be a valid string (got int 30)",
        ),
        ({**BASE, "metdata": {"name": "x"}}, "metdata: unknown key; did you mean 'metadata'?"),
        (
            with_spec(accelerate={"mixedPrecison": "bf16"}),
            "spec.accelerate.mixedPrecison: unknown key; did you mean 'mixedPrecision'?",
        ),
        (with_spec(nodes=0), "spec.nodes: must be between 1 and 512, got 0"),
        (with_spec(nodes=-3), "spec.nodes: must be between 1 and 512, got -3"),
        (with_spec(nodes=10**12), "spec.nodes: must be between 1 and 512, got 1000000000000"),
        (
            with_spec(gpusPerNode=9),
            "spec.gpusPerNode: must be between 1 and 8 (an HGX node has 8 GPUs), got 9; use more nodes for more GPUs",
        ),
        (with_spec(nodes="2"), "spec.nodes: Input should be a valid integer (got str '2')"),
        (with_spec(nodes=True), "spec.nodes: Input should be a valid integer (got bool True)"),
        (with_spec(nodes=2.5), "spec.nodes: Input should be a valid integer (got float 2.5)"),
        (with_spec(env=["A=1"]), "spec.env: Input should be a valid dictionary (got list ['A=1'])"),
        (
            with_spec(maxRestarts=1000),
            "spec.maxRestarts: Input should be less than or equal to 100 (got 1000)",
        ),
        (
            with_spec(timeLimit="4 hours"),
            "spec.timeLimit: '4 hours' is not a duration; use e.g. '90s', '30m', '4h' or '1h30m'",
        ),
        (with_spec(timeLimit="9999d"), "spec.timeLimit: '9999d' is out of range; give 1s to 30d"),
        (
            with_spec(memoryPerNode="1Ei"),
            "spec.memoryPerNode: '1Ei' is not a quantity; use e.g. '16', '500m', '64Gi'",
        ),
        (
            with_spec(memoryPerNode="100Pi"),
            "spec.memoryPerNode: '100Pi' is out of range; give up to 64Ti, e.g. '512Gi'",
        ),
        (
            with_spec(cpuPerNode=100000),
            "spec.cpuPerNode: 100000 is out of range; give 1m to 1024 cores",
        ),
        (
            with_spec(queue="Team A"),
            "spec.queue: 'Team A' is not a queue name; use lowercase letters, digits and '-' (at most 63)",
        ),
        (
            with_spec(env={"RANK": "3"}),
            "spec.env: RANK is set by the Aviflow runtime and cannot be overridden",
        ),
        (
            with_spec(env={"1BAD": "x"}),
            "spec.env: '1BAD' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*)",
        ),
        (
            with_spec(script=None),
            "spec: give exactly one of script, scriptFile or command (got none)",
        ),
        (
            with_spec(command=["python", "x.py"]),
            "spec: give exactly one of script, scriptFile or command (got script and command)",
        ),
        (
            with_spec(script=None, scriptFile="../../etc/passwd.py"),
            "spec: scriptFile: '../../etc/passwd.py' climbs out of the spec's directory with '..'; give a path inside it or an absolute path",
        ),
        (
            with_spec(accelerate={"configFile": "a/../../x.yaml"}),
            "spec: accelerate.configFile: 'a/../../x.yaml' climbs out of the spec's directory with '..'; give a path inside it or an absolute path",
        ),
        (
            with_spec(script=None, command=[]),
            "spec.command: must be a non-empty argv list, e.g. ['python', 'train.py', '--lr', '3e-4']",
        ),
        (
            with_spec(script="x" * (2 << 20)),
            "spec.script: is larger than 1048576 bytes; put the code in scriptFile",
        ),
        (
            {**BASE, "apiVersion": "aviflow.dev/v2"},
            "apiVersion: must be 'aviflow.dev/v1', got 'aviflow.dev/v2'",
        ),
        ({**BASE, "kind": "Job"}, "kind: must be 'TrainJob', got 'Job'"),
        (
            {**BASE, "metadata": {"name": "../../etc"}},
            "metadata.name: '../../etc' contains a slash, backslash or control character; use letters, digits, '-', '_' or '.'",
        ),
        (
            {**BASE, "metadata": {"name": "a\x01b"}},
            "metadata.name: 'a\\x01b' contains a slash, backslash or control character; use letters, digits, '-', '_' or '.'",
        ),
        ({**BASE, "metadata": {"name": "a\x00b"}}, "metadata.name: has a NUL byte"),
        (
            {**BASE, "metadata": {"name": "run \ud800"}},
            "metadata.name: has a character that is not valid Unicode text at position 4 (a lone surrogate)",
        ),
        (
            with_spec(env={"NOTE": "x\udcff"}),
            "spec.env.NOTE: has a character that is not valid Unicode text at position 1 (a lone surrogate)",
        ),
        (
            with_spec(env={"A\udcff": "1"}),
            "spec.env.A\\udcff: the key has a character that is not valid Unicode text at position 1 (a lone surrogate)",
        ),
        (
            with_spec(resumeFrom={"job": "Not An Id", "step": 1}),
            "spec.resumeFrom.job: 'Not An Id' is not a job id (ids look like 'tiny-3f9a1c2b')",
        ),
        (
            with_spec(resumeFrom={"job": "tiny-1", "step": -1}),
            "spec.resumeFrom.step: Input should be greater than or equal to 0 (got -1)",
        ),
        ({**BASE, "metadata": {"name": ""}}, "metadata.name: must not be empty"),
        (
            {**BASE, "metadata": {"name": "n" * 500}},
            "metadata.name: is 500 characters long; at most 128 are allowed",
        ),
        (
            {**BASE, "metadata": {"name": "x", "labels": {"team": "a b"}}},
            "metadata.labels: label team='a b': values are at most 63 of [A-Za-z0-9-_.], starting and ending alphanumeric",
        ),
        ({k: v for k, v in BASE.items() if k != "spec"}, "spec: required key is missing"),
    ],
)
def test_bad_specs_are_rejected_with_the_key_named(data, expected):
    with pytest.raises(SpecError) as info:
        TrainJob.from_dict(data)
    assert expected in info.value.problems


def test_several_problems_are_reported_together():
    with pytest.raises(SpecError) as info:
        TrainJob.from_dict(with_spec(nodes=0, gpusPerNode=9, gpuPerNode=1))
    assert len(info.value.problems) == 3
    assert str(info.value).startswith("invalid TrainJob spec:\n  - ")


@pytest.mark.parametrize("text", ["[1, 2", "- just\n- a list\n", "42"])
def test_not_a_mapping_or_not_yaml(text):
    with pytest.raises(SpecError):
        TrainJob.from_yaml(text)


def test_deeply_nested_input_is_refused_cleanly():
    nested: object = "x"
    for _ in range(100):
        nested = {"a": nested}
    with pytest.raises(SpecError, match="nested more than 32 levels deep"):
        TrainJob.from_dict(with_spec(env=nested))
    with pytest.raises(SpecError, match="not valid JSON: nested too deeply"):
        TrainJob.from_json("[" * 100_000 + "]" * 100_000)


def test_a_huge_wrong_value_is_not_echoed_back():
    with pytest.raises(SpecError) as info:
        TrainJob.from_dict(with_spec(nodes="9" * 10_000_000))
    assert len(str(info.value)) < 200
    assert str(info.value).startswith(
        "invalid TrainJob spec: spec.nodes: Input should be a valid integer (got str '9999"
    )


def test_a_spec_file_that_is_not_utf8_is_a_spec_error(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_bytes(b"metadata:\n  name: caf\xe9\n")
    with pytest.raises(SpecError) as info:
        TrainJob.load(path)
    assert str(info.value) == (
        f"invalid TrainJob spec: {path} is not UTF-8 text (byte 21: b'\\xe9'); save it as UTF-8"
    )


def test_with_changes_revalidates():
    job = TrainJob.from_dict(BASE)
    assert job.with_changes(nodes=3).spec.nodes == 3
    with pytest.raises(SpecError):
        job.with_changes(gpusPerNode=16)


def test_units():
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d") == 172800
    assert format_duration(5400) == "1h30m"
    assert parse_quantity("64Gi") == 64 * 2**30
    assert parse_quantity("500m") == 0.5
    with pytest.raises(ValueError):
        parse_duration("")


@pytest.mark.parametrize(
    ("accelerate", "message"),
    [
        ({"fsdp": {"offload": True}}, "spec.accelerate: fsdp options need strategy: fsdp"),
        ({"strategy": "ddp", "fsdp": {}}, "spec.accelerate: fsdp options need strategy: fsdp"),
        (
            {"strategy": "fsdp", "configFile": "fsdp.yaml"},
            "spec.accelerate: give a strategy or a configFile, not both",
        ),
        ({"strategy": "zero3"}, "spec.accelerate.strategy: must be 'ddp' or 'fsdp'"),
        ({"strategy": "fsdp", "fsdp": {"sharding": "hybrid"}}, "spec.accelerate.fsdp.sharding"),
        ({"strategy": "fsdp", "fsdp": {"ofload": True}}, "did you mean 'offload'?"),
        ({"strategy": "fsdp", "fsdp": {"offload": "yes"}}, "spec.accelerate.fsdp.offload"),
    ],
)
def test_a_strategy_preset_is_checked_by_the_spec_model(accelerate, message):
    data = {"metadata": {"name": "x"}, "spec": {"scriptFile": "t.py", "accelerate": accelerate}}
    with pytest.raises(SpecError, match=re.escape(message)):
        TrainJob.from_dict(data)


def test_a_strategy_preset_round_trips():
    data = {
        "metadata": {"name": "x"},
        "spec": {
            "scriptFile": "t.py",
            "accelerate": {"strategy": "fsdp", "fsdp": {"activationCheckpointing": True}},
        },
    }
    job = TrainJob.from_dict(data)
    assert job.spec.accelerate.fsdp_options.sharding == "full"
    assert job.to_dict()["spec"]["accelerate"] == {
        "mixedPrecision": "no",
        "strategy": "fsdp",
        "fsdp": {"sharding": "full", "offload": False, "activationCheckpointing": True},
    }
    assert TrainJob.from_dict(job.to_dict()) == job
