"""TrainJobs on the test control plane: the KubernetesBackend submits, the controller drives
the lifecycle on Kueue, the pods run real accelerate + torch (gloo on the CPU), and metrics,
logs and checkpoints come back through the same ``Job`` API as locally."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

import pytest

from aviflow import api
from aviflow.records import EventType, JobState
from aviflow.spec import TrainJob
from aviflow_testcluster import wait_for

pytestmark = pytest.mark.cluster

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()


def tiny(name: str, queue: str = "default", nodes: int = 2, gpus: int = 2, **spec: Any) -> TrainJob:
    env = {"TINY_STEPS": "30", "TINY_CKPT_EVERY": "10", **spec.pop("env", {})}
    return TrainJob.from_dict(
        {
            "metadata": {"name": name},
            "spec": {
                "queue": queue,
                "nodes": nodes,
                "gpusPerNode": gpus,
                "script": TINY,
                "env": env,
                **spec,
            },
        }
    )


def test_a_2x2_job_trains_on_two_hgx_nodes_and_its_results_come_back(make_pool: Any) -> None:
    pool = make_pool()
    job = api.submit(tiny("tiny k8s"), pool.backend)
    assert job.wait(timeout=240) is JobState.SUCCEEDED, job.logs(0)
    kinds = [e.type for e in job.events()]
    assert kinds == [EventType.QUEUED, EventType.STARTING, EventType.RUNNING, EventType.SUCCEEDED]
    rows = job.metric_rows()
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert rows[-1]["loss"] < rows[0]["loss"]
    assert [c.step for c in job.checkpoints()] == [10, 20, 30]
    assert "done" in job.logs(0) and "=== attempt 1 rank 3" in job.logs(3)
    # the pods ran on two different HGX nodes, under Kueue, as an Indexed Job
    pods = json.loads(
        pool.cluster.kubectl(
            "get", "pods", "-n", pool.namespace, "-l", f"aviflow.dev/job={job.id}", "-o", "json"
        ).stdout
    )["items"]
    assert sorted(
        p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods
    ) == ["0", "1"]
    # Kueue placed them (topology-aware) on HGX servers of one block
    hosts = {p["spec"]["nodeName"] for p in pods}
    nodes = json.loads(pool.cluster.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    blocks = {
        n["metadata"]["labels"]["topology.aviflow.dev/block"]
        for n in nodes
        if n["metadata"]["name"] in hosts
    }
    assert all(h.startswith("hgx-") for h in hosts) and len(blocks) == 1, (hosts, blocks)
    cr = json.loads(
        pool.cluster.kubectl("get", "trainjob", job.id, "-n", pool.namespace, "-o", "json").stdout
    )
    assert (cr["status"]["state"], cr["status"]["attempt"]) == ("SUCCEEDED", 1)
    wl = json.loads(
        pool.cluster.kubectl("get", "workloads", "-n", pool.namespace, "-o", "json").stdout
    )["items"]
    assert len(wl) == 1 and any(
        c["type"] == "Finished" and c["status"] == "True" for c in wl[0]["status"]["conditions"]
    )


def test_cancel_while_queued_and_while_running_leaves_nothing(make_pool: Any) -> None:
    pool = make_pool({"default": {"gpus": 4}})
    slow = tiny("slow", env={"TINY_STEPS": "100000", "TINY_STEP_SLEEP": "0.05"})
    running = api.submit(slow, pool.backend)
    waiting = api.submit(slow, pool.backend)  # 4 more GPUs than the quota has left
    wait_for(lambda: running.status is JobState.RUNNING, 180, "the first job running")
    status = wait_for(
        lambda: (s := waiting.status_record()).queue_position == 1 and s,
        60,
        "the second job queued at position 1",
    )
    assert status.state is JobState.QUEUED and "insufficient" in status.message.lower(), status
    assert waiting.cancel() is True
    assert running.cancel() is True
    assert [e.type for e in waiting.events()] == [EventType.QUEUED, EventType.CANCELLED]
    assert [e.type for e in running.events()][-1] is EventType.CANCELLED
    wait_for(lambda: not any(pool.leftovers().values()), 60, f"nothing left: {pool.leftovers()}")
