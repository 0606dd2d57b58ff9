"""The typed records: one serialization each, round trips, golden wire shapes."""

from __future__ import annotations

import json

import pytest

from aviflow.errors import (
    AccessDenied,
    AviflowError,
    BackendError,
    BackendUnavailable,
    JobNotFound,
    RequestError,
    SpecError,
    from_wire,
)
from aviflow.records import (
    CheckpointRef,
    Event,
    EventType,
    FailureInfo,
    JobMeta,
    JobState,
    JobStatus,
    JobSummary,
    LogChunk,
    MetricRow,
    PendingJob,
    QueueQuota,
)

FAILURE = FailureInfo(
    rank=3,
    node=1,
    attempt=2,
    exception="ValueError",
    message="bad batch",
    traceback="Traceback ...",
    exit_code=1,
    log_tail="",
    time=12.5,
    pid=4242,
)

RECORDS = [
    FAILURE,
    Event(EventType.RESTARTING, 2, "rank 3 failed", 13.0, {"failure": FAILURE.to_dict()}),
    JobStatus(JobState.FAILED, 2, "rank 3 failed", 13.0, None, FAILURE),
    JobStatus(JobState.QUEUED, 0, "waiting", 1.0, queue_position=4),
    CheckpointRef("tiny-1234abcd", 40, time=9.0, attempt=1),
    QueueQuota("vision", 8, 4, 1, "vision", 0, (PendingJob("a-1", "alice", 1, 4),), lendable=3),
    QueueQuota("free", None),
    JobMeta("tiny-1234abcd", "tiny", "alice", 1.0, "vision", "local", "sha256:x", {"cell_id": "c"}),
    JobSummary("tiny-1234abcd", "tiny", "alice", None, "default", 2, 4, JobState.RUNNING),
    MetricRow(5, 2.0, 1, {"loss": 0.5, "tag": "warmup"}),
    LogChunk(0, "héllo\n", 10, 17, 17),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_round_trips_through_json(record):
    wire = json.loads(json.dumps(record.to_dict()))
    assert type(record).from_dict(wire) == record


def test_status_keys_are_camel_case_and_absent_when_empty():
    assert JobStatus(JobState.QUEUED, 0, "waiting", 1.0, queue_position=4).to_dict() == {
        "state": "QUEUED",
        "attempt": 0,
        "message": "waiting",
        "updated": 1.0,
        "queuePosition": 4,
    }
    assert FAILURE.to_dict()["exitCode"] == 1 and "logTail" not in FAILURE.to_dict()
    assert JobStatus.from_dict({}) == JobStatus()
    # keys a newer writer adds are ignored
    assert JobStatus.from_dict({"state": "RUNNING", "futureKey": 1}).state is JobState.RUNNING


def test_event_types_say_which_end_an_attempt():
    ends = {t for t in EventType if t.ends_attempt()}
    assert ends == {
        EventType.RESTARTING,
        EventType.EVICTED,
        EventType.PREEMPTED,
        EventType.SUCCEEDED,
        EventType.FAILED,
        EventType.CANCELLED,
    }
    assert EventType.RUNNING.state() is JobState.RUNNING and EventType.EVICTED.state() is None


def test_failure_wording():
    assert (FAILURE.where(), FAILURE.what(), FAILURE.detail()) == (
        "rank 3 on node 1",
        "ValueError: bad batch",
        "Traceback ...",
    )
    node = FailureInfo(node=0, exit_code=-9, log_tail="Killed")
    assert (node.where(), node.what(), node.detail()) == ("node 0", "exit code -9", "Killed")


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (SpecError(["spec.nodes: bad", "spec.queue: bad"]), 400),
        (SpecError("spec.nodes: bad"), 400),
        (RequestError("unknown key 'bundel'; did you mean 'bundle'?"), 400),
        (JobNotFound("no job 'x'"), 404),
        (AccessDenied("this token lacks the scope custom:aviflow:submit"), 403),
        (BackendError("queue 'vision' has a quota of 2"), 409),
        (BackendUnavailable("cannot reach aviflow-api at http://x/"), 503),
    ],
)
def test_errors_cross_the_wire_as_the_same_class(error, status):
    assert error.http_status == status
    again = from_wire(json.loads(json.dumps(error.to_wire())), status)
    assert type(again) is type(error)
    assert str(again) == str(error) and again.problems == error.problems


def test_an_error_body_without_a_known_class_maps_by_status():
    assert type(from_wire({}, 404)) is JobNotFound
    assert type(from_wire({"error": "Weird"}, 403)) is AccessDenied
    assert type(from_wire({"message": "x"}, 409)) is BackendError
    for unavailable in (502, 503, 504):  # a proxy in front of a service that is down
        assert type(from_wire({"message": "x"}, unavailable)) is BackendUnavailable
    assert isinstance(from_wire({}, 500, "boom"), AviflowError)
    assert str(from_wire({}, 500, "boom")) == "boom"


def test_the_module_examples_run() -> None:
    import doctest

    from aviflow import paging, records

    assert doctest.testmod(records).failed == 0  # the status keys
    assert doctest.testmod(paging) == (0, 5)  # read_pages, wire_bytes
