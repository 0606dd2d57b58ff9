"""No orphans, on the test control plane (a real API server, Kueue, the controller in this
process): a submission whose answer is lost, one cut short between its run directory and its
TrainJob, and one retried with its ``Idempotency-Key`` each end as one job with the right
owner, or as none with a clear reason; a finished TrainJob costs the controller nothing.

Faults are injected at the network edge only, in the REST layer of the backend's own API
client (:class:`Edge`): the request goes to the real API server and its answer is lost, or
it never goes. Kueue admits nothing here (a queue of 0 GPUs), so no pod runs: these tests
are about what is recorded, and take seconds.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import urllib3
from aviflow_pool import Pool

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.errors import BackendError, BackendUnavailable
from aviflow.operator._binding import Binder
from aviflow.records import EventType, JobState, Owner
from aviflow.spec import TrainJob
from aviflow_hub.authz import Principal
from aviflow_hub.config import HubConfig
from aviflow_hub.ledger.store import Ledger
from aviflow_hub.service.ingest import Ingest
from aviflow_hub.service.jobs import submit_once
from aviflow_hub.service.queues import read_quotas
from aviflow_hub.service.submission import KeyReused, request_hash
from aviflow_testcluster import wait_for

pytestmark = pytest.mark.cluster

IMAGE = {"name": "trainer-none", "image": "aviflow/trainer:none"}  # never pulled: no pod runs
JOB = TrainJob.from_dict(
    {"metadata": {"name": "once"}, "spec": {"script": "print(1)", "queue": "default"}}
)
ALICE, BOB = Owner("alice", "default"), Owner("bob", "default")
CFG = HubConfig.from_dict(
    {"teams": [{"name": "default", "groups": ["g"], "queue": "default", "gpuQuota": 0}]}
)
ROOT = Principal("root", admin=True)


class Edge:
    """The REST layer of ``api`` where the next ``times`` creates of a TrainJob meet
    ``fault``: ``"lost"`` (sent and applied, then the answer does not come: urllib3's read
    timeout), ``"silent"`` (the same timeout, nothing sent) or ``"killed"`` (the process dies
    before sending: SystemExit)."""

    def __init__(self, api: Any, fault: str, times: int = 1) -> None:
        self.fault, self.left, self.hit = fault, times, 0
        self.real = api.rest_client.request
        api.rest_client.request = self.request

    def request(self, method: str, url: str, *args: Any, **kw: Any) -> Any:
        if self.left <= 0 or method != "POST" or not urlparse(url).path.endswith("/trainjobs"):
            return self.real(method, url, *args, **kw)
        self.left -= 1
        self.hit += 1
        if self.fault == "killed":
            raise SystemExit("the process died here")
        if self.fault == "lost":
            self.real(method, url, *args, **kw)
        raise urllib3.exceptions.ReadTimeoutError(None, url, "Read timed out. (read timeout=30)")


@pytest.fixture
def idle_pool(crd_installed: Any, restricted_namespace: str, tmp_path: Path) -> Iterator[Pool]:
    """A Pool whose one queue (``default``) has no GPUs: Kueue admits nothing."""
    root = tmp_path / "runs"
    root.mkdir()
    pool = Pool(crd_installed, restricted_namespace, root, {"default": {"gpus": 0}}, [IMAGE])
    yield pool
    pool.close()


def backend(pool: Pool) -> KubernetesBackend:
    """A backend with an API client of its own (its REST layer is the one faults go to)."""
    return KubernetesBackend(pool.settings, api=pool.cluster.api_client())


def trainjobs(pool: Pool) -> list[dict[str, Any]]:
    out = pool.cluster.kubectl("get", "trainjobs", "-n", pool.namespace, "-o", "json").stdout
    return list(json.loads(out)["items"])


def queued_count(ledger: Ledger) -> int:
    """The queue bar's count of waiting jobs, as aviflow-api's ``GET queues`` reads it."""
    [quota] = read_quotas(ledger, ROOT, CFG)
    return quota.pending_count


def bound(pool: Pool, b: KubernetesBackend, job_id: str) -> Callable[[], bool]:
    """The controller has taken the job up: bound it, recorded its QUEUED event."""
    run = b.run_dir(job_id)
    return lambda: (run.path / "k8s.json").exists() and bool(run.events().items)


def test_a_create_whose_answer_is_lost_makes_one_job_of_its_owner(idle_pool: Pool) -> None:
    pool = idle_pool
    pool.start_controller()
    b = backend(pool)
    edge = Edge(b.api, "lost")
    ledger = Ledger("sqlite://")
    summary = submit_once(b, ledger, JOB, build_bundle(JOB), ALICE)
    assert edge.hit == 1  # the first create went through; its answer never came
    # sent again: the API server's 409 named a TrainJob with this submission's token
    [cr] = trainjobs(pool)
    annotations = cr["metadata"]["annotations"]
    run = b.run_dir(summary.id)
    assert cr["metadata"]["name"] == summary.id and b.list_ids() == [summary.id]
    assert annotations["aviflow.dev/user"] == "alice"
    assert annotations["aviflow.dev/submission"] == run.submission_token()
    assert (run.meta().user, run.meta().team, run.path.parent.name) == ("alice", "default", "alice")
    wait_for(bound(pool, b, summary.id), 30, "the controller binding the directory")
    assert b.store.pending() == [] and b.status(summary.id).state is JobState.QUEUED
    Ingest(b, ledger).step()  # the change feed finds the same job, not a second one
    rows = [(s.id, s.user, s.team, s.state) for s in ledger.summaries()]
    assert rows == [(summary.id, "alice", "default", JobState.QUEUED)]
    assert queued_count(ledger) == 1


def test_a_submission_cut_short_after_its_directory_fails_and_leaves_the_queue(
    idle_pool: Pool,
) -> None:
    pool = idle_pool
    b = backend(pool)
    Edge(b.api, "killed")
    ledger = Ledger("sqlite://")
    feed = Ingest(b, ledger)
    with pytest.raises(SystemExit):  # aviflow-api dies between the directory and the TrainJob
        submit_once(b, ledger, JOB, build_bundle(JOB), ALICE)
    [job_id] = b.list_ids()
    assert trainjobs(pool) == [] and [i for i, _ in b.store.pending()] == [job_id]
    feed.step()
    assert queued_count(ledger) == 1  # listed as waiting, as it would stay for ever
    pool.start_controller(resync=1, submission_grace=3)
    status = wait_for(
        lambda: (s := b.status(job_id)).state.is_finished() and s, 30, "the submission failed"
    )
    assert status.state is JobState.FAILED
    assert status.message.startswith(
        "the submission did not complete: its TrainJob was never created (none named "
        f"{job_id} in {pool.namespace} "
    )
    assert status.message.endswith(" s after its run directory was written); submit the job again")
    events = b.events(job_id).items
    assert [(e.type, e.attempt) for e in events] == [(EventType.QUEUED, 0), (EventType.FAILED, 0)]
    assert b.store.pending() == [] and b.meta(job_id).user == "alice"
    feed.step()
    [row] = ledger.summaries()
    assert (row.id, row.state, row.message) == (job_id, JobState.FAILED, status.message)
    assert queued_count(ledger) == 0 and ledger.attempts() == []  # no GPU time either
    # its create, held up somewhere, lands after all: the TrainJob shows that end, runs nothing
    run = b.run_dir(job_id)
    body = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {
            "name": job_id,
            "namespace": pool.namespace,
            "annotations": {"aviflow.dev/submission": run.submission_token()},
        },
        "spec": run.spec().to_dict()["spec"],
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    cr = wait_for(
        lambda: ([c for c in trainjobs(pool) if c.get("status")] or [None])[0], 30, "its status"
    )
    assert (cr["status"]["state"], cr["status"]["message"]) == ("FAILED", status.message)
    jobs = pool.cluster.kubectl("get", "jobs", "-n", pool.namespace, "-o", "name").stdout
    assert jobs.split() == []


def test_a_trainjob_taking_the_name_of_a_submission_cut_short_gets_nothing(
    idle_pool: Pool,
) -> None:
    pool = idle_pool
    b = backend(pool)
    Edge(b.api, "killed")
    with pytest.raises(SystemExit):
        b.submit(JOB, build_bundle(JOB), ALICE)
    [job_id] = b.list_ids()
    # someone applies a TrainJob of that name: not alice's job, so neither her directory nor
    # her identity; and alice's job, whose own TrainJob can never be made now, fails
    squatter = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": job_id, "namespace": pool.namespace},
        "spec": {"script": "print('mine')"},
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(squatter))
    pool.start_controller(resync=1, submission_grace=3)
    cr = wait_for(
        lambda: ([c for c in trainjobs(pool) if c.get("status")] or [None])[0], 30, "its refusal"
    )
    assert (cr["status"]["state"], cr["status"]["message"]) == (
        "FAILED",
        f"job id {job_id!r} belongs to another job in the run store",
    )
    status = wait_for(
        lambda: (s := b.status(job_id)).state.is_finished() and s, 30, "the submission failed"
    )
    assert (status.state, status.message) == (
        JobState.FAILED,
        "the submission did not complete: its TrainJob was never created (the TrainJob named "
        f"{job_id} in {pool.namespace} is another one); submit the job again",
    )
    assert b.meta(job_id).user == "alice" and b.list_ids() == [job_id]
    assert not (b.run_dir(job_id).path / "k8s.json").exists()  # bound to nothing


def test_a_retry_with_the_same_key_returns_the_same_job(idle_pool: Pool) -> None:
    pool = idle_pool
    pool.start_controller()
    b = backend(pool)
    ledger = Ledger("sqlite://")
    bundle = build_bundle(JOB)
    asked = request_hash(JOB, bundle)
    # the API server does not answer either create: the job is recorded, its TrainJob unsure
    edge = Edge(b.api, "silent", times=2)
    with pytest.raises(BackendUnavailable) as unsure:
        submit_once(b, ledger, JOB, bundle, ALICE, "key-1", asked)
    [job_id] = b.list_ids()
    assert edge.hit == 2 and trainjobs(pool) == []
    assert f"Job {job_id} is recorded, and its TrainJob may have been created" in str(unsure.value)
    # the client tries again with its key: the same job, its submission completed
    first = submit_once(b, ledger, JOB, bundle, ALICE, "key-1", asked)
    again = submit_once(b, ledger, JOB, bundle, ALICE, "key-1", asked)
    assert first.id == again.id == job_id
    # bob's key of the same text is his own: another job, his
    bobs = submit_once(b, ledger, JOB, bundle, BOB, "key-1", asked)
    assert bobs.id != job_id and b.meta(bobs.id).user == "bob"
    other = TrainJob.from_dict({**JOB.to_dict(), "spec": {"script": "print(2)"}})
    code = build_bundle(other)
    with pytest.raises(KeyReused, match=f"sent with another submission .* job {job_id};"):
        submit_once(b, ledger, other, code, ALICE, "key-1", request_hash(other, code))
    assert sorted(c["metadata"]["name"] for c in trainjobs(pool)) == sorted([job_id, bobs.id])
    assert sorted(b.list_ids()) == sorted([job_id, bobs.id])
    for job in (job_id, bobs.id):
        wait_for(bound(pool, b, job), 30, f"the controller binding {job}")
    Ingest(b, ledger).step()
    assert sorted((s.id, s.user) for s in ledger.summaries()) == sorted(
        [(job_id, "alice"), (bobs.id, "bob")]
    )


def test_an_id_whose_name_another_trainjob_holds_leaves_nothing(idle_pool: Pool) -> None:
    pool = idle_pool  # no controller: the other TrainJob stays as it was made
    b = backend(pool)
    theirs = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "once-0000cafe", "namespace": pool.namespace},
        "spec": {"script": "print(0)"},
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(theirs))
    with pytest.raises(BackendError) as held:
        b.submit(JOB, build_bundle(JOB), ALICE, job_id="once-0000cafe")
    assert str(held.value) == (
        f"submitting 'once': the cluster has another TrainJob named once-0000cafe in "
        f"{pool.namespace}; submit again (without this job id)"
    )
    # ours can never be made under that name: its directory is gone, nothing is pending
    assert b.list_ids() == [] and b.store.pending() == []
    [cr] = trainjobs(pool)
    assert "aviflow.dev/submission" not in (cr["metadata"].get("annotations") or {})


def test_a_finished_trainjob_costs_the_controller_nothing(
    idle_pool: Pool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = idle_pool
    reads: list[str] = []  # every reconcile that gets past the cache reads the run store
    run_dir = Binder.run_dir
    monkeypatch.setattr(
        Binder,
        "run_dir",
        lambda self, cr: reads.append(cr["metadata"]["name"]) or run_dir(self, cr),
    )
    pool.start_controller(resync=1)
    body = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "no-code", "namespace": pool.namespace},
        "spec": {"scriptFile": "train.py"},  # refused: FAILED on its status
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(body))
    wait_for(lambda: any(c.get("status") for c in trainjobs(pool)), 30, "the refusal")
    # a child of it (a Job labelled with its id, suspended): each resync hands it back, and
    # each time the controller is asked about its TrainJob
    child = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": "no-code-a1",
            "namespace": pool.namespace,
            # a queue Kueue does not have: it keeps the Job suspended, no pod is made
            "labels": {"aviflow.dev/job": "no-code", "kueue.x-k8s.io/queue-name": "none"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "none"}]}
            },
        },
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(child))
    time.sleep(4)  # four resyncs
    assert reads == ["no-code"]
    pool.stop_controller()
    pool.start_controller(resync=1)  # nor does a controller that starts afresh read it
    time.sleep(3)
    assert reads == ["no-code"]


def test_a_driven_trainjob_whose_directory_went_is_refused_and_its_attempt_deleted(
    idle_pool: Pool,
) -> None:
    """A TrainJob driven before (its attempt's Job made, waiting in Kueue) whose run directory
    an admin removed: FAILED with the reason, and its attempt Job deleted, so it holds no
    quota; a Job of the same label that it does not own is left alone."""
    pool = idle_pool
    pool.start_controller()
    b = backend(pool)
    summary = submit_once(b, Ledger("sqlite://"), JOB, build_bundle(JOB), ALICE)
    attempt = f"{summary.id}-a1"

    def jobs() -> list[str]:
        out = pool.cluster.kubectl("get", "jobs", "-n", pool.namespace, "-o", "json").stdout
        return sorted(
            j["metadata"]["name"]
            for j in json.loads(out)["items"]
            if not j["metadata"].get("deletionTimestamp")
        )

    wait_for(lambda: jobs() == [attempt], 60, "its first attempt's Job")
    stranger = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": f"{summary.id}-other",
            "namespace": pool.namespace,
            "labels": {"aviflow.dev/job": summary.id, "kueue.x-k8s.io/queue-name": "none"},
        },
        "spec": {
            "suspend": True,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "none"}]}
            },
        },
    }
    pool.cluster.kubectl("create", "-f", "-", input=json.dumps(stranger))
    b.store.remove(summary.id)
    [cr] = wait_for(
        lambda: [c for c in trainjobs(pool) if (c.get("status") or {}).get("state") == "FAILED"],
        60,
        "the refusal",
    )
    assert cr["status"]["message"].startswith(
        f"job {summary.id}'s run directory is not in the run store"
    )
    wait_for(lambda: jobs() == [f"{summary.id}-other"], 30, "its attempt Job deleted")
