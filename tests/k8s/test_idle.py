"""The admin's idle rule on the test control plane: a TrainJob that holds its GPUs and does
nothing is flagged by the controller and, with ``action: cancel``, stopped as CANCELLED with
the rule's words (not FAILED by the pods it stopped), its pods and Workload gone."""

from __future__ import annotations

from typing import Any

import pytest

from aviflow import api
from aviflow.records import EventType, JobState
from aviflow.spec import TrainJob
from aviflow_testcluster import wait_for

pytestmark = pytest.mark.cluster

SLEEPS = "import time\ntime.sleep(600)\n"
RULE = {"belowPercent": 20, "afterSeconds": 3, "action": "cancel"}
MESSAGE = "idle: CPU utilization under 20% for 3 s; cancelling it"


def test_an_idle_job_is_cancelled_by_the_rule_and_ends_cancelled(make_pool: Any) -> None:
    pool = make_pool(settings={"usage": {"intervalSeconds": 1, "idle": RULE}})
    spec = {"queue": "default", "nodes": 2, "gpusPerNode": 1, "script": SLEEPS}
    job = api.submit(
        TrainJob.from_dict({"metadata": {"name": "sleeper"}, "spec": spec}), pool.backend
    )
    wait_for(
        lambda: job.status.is_finished(),
        240,
        lambda: (
            f"the sleeper ended; it is {job.status_record()}, events "
            f"{[(e.type.value, e.message) for e in job.events()]}"
        ),
    )
    events = job.events()
    assert job.status is JobState.CANCELLED, [(e.type.value, e.message) for e in events]
    [flag] = [e for e in events if e.type is EventType.IDLE]
    assert flag.message == MESSAGE
    assert flag.data["action"] == "cancel"
    assert (events[-1].type, events[-1].message) == (EventType.CANCELLED, MESSAGE)
    assert EventType.FAILED not in [e.type for e in events]
    used = [e for e in events if e.type is EventType.USAGE]
    assert used, "a USAGE event before the flag"
    assert used[-1].data["kind"] == "cpu" and used[-1].data["util"] < 20
    wait_for(lambda: not any(pool.leftovers().values()), 60, lambda: f"left: {pool.leftovers()}")
