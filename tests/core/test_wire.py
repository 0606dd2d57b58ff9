"""One codec (aviflow.wire): every record's wire form derived from its definition, the
generated schemas and types current, and a sample of every record through the published
OpenAPI schema and back. (TypeScript's check of the same samples: tests/extensions.)"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import jsonschema
import pytest
import yaml

from aviflow import wire, wire_gen, wire_samples
from aviflow.attempts import AttemptRecord
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.k8s import crd
from aviflow.records import (
    CheckpointRef,
    Event,
    EventType,
    FailureInfo,
    JobMeta,
    JobState,
    JobStatus,
    JobSummary,
    QueueQuota,
)
from aviflow.store._data import failure_record
from aviflow.wire import WireError, from_wire, to_wire

REGENERATE = "make generate (or: python -m aviflow.wire_gen)"


@pytest.mark.parametrize("path", list(wire_gen.generated()), ids=str)
def test_each_generated_file_is_what_the_records_generate_now(path: Any) -> None:
    committed = (wire_gen.ROOT / path).read_text(encoding="utf-8")
    assert committed == wire_gen.generated()[path], f"{path} is stale: run `{REGENERATE}`"


def test_the_crd_manifest_carries_the_generated_status_schema() -> None:
    assert crd.committed() == crd.render(), (
        "run `make generate` (or: python -m aviflow.k8s.crd > aviflow/k8s/trainjobs.aviflow.dev.yaml)"
    )
    status = crd.trainjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert (
        status["properties"]["status"]["properties"] == wire_gen.crd_status_schema()["properties"]
    )


def test_every_wire_record_has_a_schema_and_a_sample() -> None:
    assert set(wire.records()) == set(wire_gen.RECORDS)
    assert {type(s) for s in wire_samples.SAMPLES} == set(wire_gen.RECORDS)


def _validator(name: str) -> jsonschema.protocols.Validator:
    """A validator of the schema ``name`` of the published document (hub/.../openapi.yaml)."""
    document = yaml.safe_load((wire_gen.ROOT / wire_gen.OPENAPI).read_text(encoding="utf-8"))
    root = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return jsonschema.Draft202012Validator(root)


@pytest.mark.parametrize(
    "sample",
    wire_samples.SAMPLES,
    ids=[f"{type(s).__name__}-{i}" for i, s in enumerate(wire_samples.SAMPLES)],
)
def test_a_sample_of_every_record_round_trips_through_the_published_schema(sample: Any) -> None:
    cls = type(sample)
    sent = json.loads(json.dumps(to_wire(sample)))
    _validator(wire.rules(cls).name).validate(sent)
    assert from_wire(cls, sent) == sample
    assert cls.from_dict(sent) == sample and sample.to_dict() == to_wire(sample)


def test_the_published_schema_refuses_what_the_records_never_write() -> None:
    for name, wrong in [
        ("FailureInfo", {"attempt": "1"}),
        ("JobStatus", {"state": "LOST", "attempt": 0}),
        ("JobSummary", {**to_wire(wire_samples.SAMPLES[12]), "queuePosition": "2"}),
        ("ExpectedStart", {"low": 1.0}),
        ("QueueQuota", {**to_wire(QueueQuota("q", None)), "pending": [{"id": "a"}]}),
    ]:
        with pytest.raises(jsonschema.ValidationError):
            _validator(name).validate(wrong)


def test_keys_keep_their_order_and_presence_rules() -> None:
    summary = JobSummary("j", "n", "u", None, "q", 2, 4, JobState.RUNNING)
    assert list(to_wire(summary)) == [
        "id", "name", "user", "team", "queue", "nodes", "gpusPerNode", "gpus", "state",
        "attempt", "message", "queuePosition", "submitted", "updated", "finished",
        "gpuSeconds", "origin",
    ]  # fmt: skip
    assert to_wire(summary)["gpus"] == 8
    assert list(to_wire(wire_samples.SAMPLES[5])) == [
        "state",
        "attempt",
        "message",
        "updated",
        "queuePosition",
        "expectedStart",
        "wait",
    ]
    assert list(to_wire(Event(EventType.QUEUED, 0, "m", 1.0, {"a": 1}))) == [
        "type",
        "attempt",
        "time",
        "message",
        "data",
    ]
    # (a field added later follows these)
    assert list(to_wire(QueueQuota("q", 1, team="t")))[:7] == [
        "queue",
        "team",
        "gpuQuota",
        "gpusInUse",
        "pendingCount",
        "borrowed",
        "pending",
    ]
    meta = JobMeta("j", "n", "u", 1.0)
    assert list(to_wire(meta)) == [
        "id",
        "name",
        "user",
        "team",
        "submitted",
        "backend",
        "codeHash",
        "origin",
    ]
    # "empty": None and empty text go, numbers stay (a rank 0, an attempt 0)
    assert to_wire(FailureInfo(rank=0, message="")) == {"rank": 0, "attempt": 0}
    assert to_wire(Estimate("x", 1764802680.0, None)) == {
        "low": 1764802680.0,
        "high": None,
        "window": "12-03T22:58Z..",
    }
    assert to_wire(CheckpointRef("j", 4)) == {"job": "j", "step": 4}
    assert list(AttemptRecord.__dataclass_fields__) == list(to_wire(wire_samples.SAMPLES[-1]))


def test_reading_converts_as_before_and_names_what_it_cannot_read() -> None:
    assert from_wire(FailureInfo, {"rank": "2", "exit_code": 3, "log_tail": "x"}) == FailureInfo(
        rank=2, exit_code=3, log_tail="x"
    )
    assert JobStatus.from_dict({"state": "", "attempt": None}) == JobStatus()
    with pytest.raises(WireError, match=r"^JobSummary.nodes: missing$"):
        JobSummary.from_dict({"id": "j", "gpusPerNode": 1, "state": "RUNNING"})
    with pytest.raises(WireError, match=r"^Event.type: 'LOST' is not a valid EventType$"):
        Event.from_dict({"type": "LOST", "time": 1.0})
    with pytest.raises(WireError, match=r"^JobStatus: not an object, \['RUNNING'\]$"):
        from_wire(JobStatus, ["RUNNING"])  # type: ignore[arg-type]
    with pytest.raises(WireError, match=r"^FailureInfo.pid: cannot convert float infinity"):
        JobStatus.from_dict({"failure": {"pid": float("inf")}})
    # a nested estimate or wait that cannot be read is dropped, not fatal
    status = JobStatus.from_dict({"expectedStart": {"low": True}, "wait": {"queue": 3}})
    assert (status.expected_start, status.wait) == (None, None)
    assert Estimate.from_dict({"low": 1.0, "high": None, "never": "n" * 900}).never == "n" * 500
    assert WaitNumbers.from_dict([1]) is None


def test_strict_reading_enforces_the_types() -> None:
    ok = {"rank": 1, "attempt": 2, "message": "m", "time": 3}
    assert from_wire(FailureInfo, ok, strict=True) == FailureInfo(
        rank=1, attempt=2, message="m", time=3.0
    )
    for key, wrong, why in [
        ("rank", True, "expected a whole number, got True"),
        ("attempt", 1.5, "expected a whole number, got 1.5"),
        ("time", float("nan"), "expected a finite number, got nan"),
        ("message", 7, "expected text, got 7"),
    ]:
        with pytest.raises(WireError, match=f"^FailureInfo.{key}: {why}$"):
            from_wire(FailureInfo, {**ok, key: wrong}, strict=True)
    # the run store's reader: a record with a wrong type is skipped, long text is bounded
    assert failure_record({**ok, "rank": "1"}) is None
    assert failure_record({**ok, "message": "x" * 5000}) == FailureInfo(
        rank=1, attempt=2, message="x" * 4000, time=3.0
    )


def test_a_type_without_a_wire_form_is_refused_where_it_is_registered() -> None:
    @wire.record()
    @dataclasses.dataclass(frozen=True)
    class Odd:
        when: complex

    try:
        with pytest.raises(TypeError, match="no wire form for the type <class 'complex'>"):
            to_wire(Odd(1j))
    finally:
        wire._RULES.pop(Odd)
    with pytest.raises(TypeError, match="Owner is not a wire record"):
        from aviflow.records import Owner

        to_wire(Owner("alice"))
