"""TrainJobs of teams in namespaces of their own (as the chart makes them): each team's jobs,
queue and run store there, and the Secrets a job names read from its team's namespace, with
no record of Aviflow's keeping a value."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aviflow import api
from aviflow.records import JobState
from aviflow.spec import TrainJob
from aviflow_testcluster import wait_for

from .trainjob_kit import TORCH_TEST_TIMEOUT, TORCH_WAIT, tiny

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(TORCH_TEST_TIMEOUT)]


def test_a_job_reads_its_teams_secret_by_name_and_no_record_keeps_the_value(
    make_pool: Any,
) -> None:
    """``spec.secrets``: the ranks see the Secret's keys as variables; the TrainJob, its
    status and the run store carry the name only. A Secret that is not there fails the
    attempt with the kubelet's words instead of holding its GPUs."""
    import hashlib
    import uuid

    pool = make_pool()
    value = f"hf_{uuid.uuid4().hex}"
    pool.cluster.kubectl(
        "create", "secret", "generic", "hf-token", f"--from-literal=HF_TOKEN={value}",
        "-n", pool.namespace,
    )  # fmt: skip
    script = (
        "import hashlib, os\n"
        "print('token', hashlib.sha256(os.environ['HF_TOKEN'].encode()).hexdigest(), flush=True)\n"
    )

    def job(name: str, secret: str) -> TrainJob:
        spec = {"queue": "default", "nodes": 1, "gpusPerNode": 1, "script": script}
        return TrainJob.from_dict(
            {"metadata": {"name": name}, "spec": {**spec, "secrets": [secret]}}
        )

    ok = api.submit(job("with-secret", "hf-token"), pool.backend)
    assert ok.wait(timeout=TORCH_WAIT) is JobState.SUCCEEDED, ok.logs(0)
    assert f"token {hashlib.sha256(value.encode()).hexdigest()}" in ok.logs(0)
    cr = pool.cluster.kubectl("get", "trainjob", ok.id, "-n", pool.namespace, "-o", "json").stdout
    assert json.loads(cr)["spec"]["secrets"] == ["hf-token"] and value not in cr
    run_dir = pool.backend.store.locate(ok.id)
    assert run_dir is not None
    kept = [p for p in run_dir.rglob("*") if p.is_file() and value.encode() in p.read_bytes()]
    assert kept == []
    # another team's Secret (in its own namespace) is not there for this job
    other = pool.cluster.create_namespace()
    try:
        pool.cluster.kubectl(
            "create", "secret", "generic", "theirs", "--from-literal=HF_TOKEN=x", "-n", other
        )
        missing = api.submit(job("no-secret", "theirs"), pool.backend)
        assert missing.wait(timeout=180) is JobState.FAILED
    finally:
        pool.cluster.kubectl("delete", "namespace", other, "--wait=false", check=False)
    failure = missing.failure
    assert failure is not None
    assert failure.message == (
        'cannot start: node 0: CreateContainerConfigError: secret "theirs" not found'
    ), failure
    wait_for(
        lambda: (
            not pool.cluster.kubectl(
                "get",
                "pods",
                "-n",
                pool.namespace,
                "-l",
                f"aviflow.dev/job={missing.id}",
                "-o",
                "name",
            ).stdout.split()
        ),
        60,
        "the stuck pod is gone",
    )


def test_each_team_runs_in_its_own_namespace(make_pool: Any) -> None:
    """Teams in namespaces of their own (``queueNamespaces``, as the chart makes them): a job
    goes to its queue's namespace and only runs there, the one controller drives both, a
    cancel reaches the right namespace, and a queue no team has is refused before anything
    is made."""
    from aviflow.errors import SpecError

    pool = make_pool({"vision": {"gpus": 2}, "nlp": {"gpus": 2}}, own_namespaces=True)
    spaces = pool.settings.queue_namespaces
    quick = api.submit(
        tiny("quick", "vision", nodes=1, gpus=1, env={"TINY_STEPS": "3"}), pool.backend
    )
    slow = api.submit(
        tiny("slow", "nlp", nodes=1, gpus=1, env={"TINY_STEPS": "100000"}), pool.backend
    )
    assert quick.wait(timeout=TORCH_WAIT) is JobState.SUCCEEDED, quick.logs(0)
    wait_for(lambda: slow.status is JobState.RUNNING, TORCH_WAIT, "the nlp job runs")
    for job, queue in ((quick, "vision"), (slow, "nlp")):
        label = f"aviflow.dev/job={job.id}"
        where = {
            ns: pool.cluster.kubectl(
                "get", "jobs,pods", "-n", ns, "-l", label, "-o", "name"
            ).stdout.split()
            for ns in pool.namespaces
        }
        assert [ns for ns, names in where.items() if names] == [spaces[queue]], where
        cr = pool.cluster.kubectl("get", "trainjob", job.id, "-n", spaces[queue], "-o", "name")
        assert cr.stdout.strip() == f"trainjob.aviflow.dev/{job.id}"
    assert [(q.queue, q.gpu_quota) for q in pool.backend.queues()] == [("nlp", 2), ("vision", 2)]
    assert slow.cancel()
    assert slow.status is JobState.CANCELLED
    wait_for(
        lambda: (
            not pool.cluster.kubectl(
                "get", "pods", "-n", spaces["nlp"], "-l", f"aviflow.dev/job={slow.id}", "-o", "name"
            ).stdout.split()
        ),
        60,
        "the cancelled job's pods are gone",
    )
    before = sorted(p.name for p in pool.root.rglob("*"))
    with pytest.raises(SpecError, match="queue 'research' is no team's queue; use one of nlp"):
        api.submit(tiny("lost", "research", nodes=1, gpus=1), pool.backend)
    assert sorted(p.name for p in pool.root.rglob("*")) == before
