"""What the controller does between a TrainJob's create call and its attempt Job (issue 28:
``bench/admission.py``'s room burst): new submissions are reconciled first, a first
reconcile makes only the calls it needs, the queue details wait ``queued_tick``. No cluster:
the controller's informer caches are filled by hand and its API clients record each call."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aviflow.k8s import manifests as m
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._controller import Controller
from aviflow.operator._observe import PodView
from aviflow.operator._status import FIRST_STATUS
from aviflow.records import Event, EventType, JobState
from aviflow.runtime.env import MAIN_ADDR, RuntimeEnv
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore

NS = "team-a"


class Raw:
    """An answer not decoded (``_preload_content=False``): it must be read and let go."""

    def __init__(self) -> None:
        self.drained = self.released = False

    def drain_conn(self) -> None:
        self.drained = True

    def release_conn(self) -> None:
        assert self.drained, "let go of a connection before reading its answer"
        self.released = True


class Calls:
    """Stands for one of the controller's API clients: records every call as (method, name
    of the object) and answers ``{}`` (a create: a :class:`Raw`), or raises
    ``ApiException(fail[method])``. Calls may come from several threads at once."""

    def __init__(
        self, log: list[tuple[str, str]], fail: dict[str, int], answers: list[Raw]
    ) -> None:
        self._log, self._fail, self._answers = log, fail, answers

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            body = next((a for a in args if isinstance(a, dict)), {})
            named = [a for a in args if isinstance(a, str) and a != NS]
            self._log.append((method, (body.get("metadata") or {}).get("name") or named[-1]))
            if method in self._fail:
                raise ApiException(status=self._fail[method])
            if method.startswith("create_"):
                assert kwargs.get("_preload_content") is False  # not decoded into models
                self._answers.append(Raw())
                return self._answers[-1]
            return {}

        return call


class Harness:
    """A controller of namespace ``team-a`` whose API calls land in ``calls`` and whose
    queue position reads (Kueue's visibility API) in ``positions``; a new job's first status
    patch waits ``first_status`` seconds (none unless told)."""

    def __init__(self, tmp_path: Path, first_status: float = 0.0, **settings: Any) -> None:
        raw = {"image": "t:1", "namespace": NS, "runs": {"localPath": str(tmp_path)}}
        self.raw = {**raw, **settings}
        self.store = RunStore(tmp_path)
        self.ctl = Controller(
            client.ApiClient(),
            ClusterSettings.from_dict(self.raw),
            self.store,
            queued_tick=5.0,
            first_status=first_status,
        )
        self.calls: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}
        self.answers: list[Raw] = []
        for api in ("core", "net", "batch", "custom"):
            setattr(self.ctl, api, Calls(self.calls, self.fail, self.answers))
        self.positions: list[str] = []

        def positions(ns: str, queue: str) -> dict[str, int]:
            self.positions.append(queue)
            return {"wl-j1-a1": 1}

        self.ctl.reads.positions = positions  # type: ignore[method-assign]
        self.cell = self.ctl.cells[NS]

    def submit(self, name: str = "j1", nodes: int = 2, **spec: Any) -> RunDir:
        """A job's run directory (as aviflow-api writes it) and its TrainJob in the cache."""
        spec = {"queue": "q", "nodes": nodes, "gpusPerNode": 1, "command": ["true"], **spec}
        job = TrainJob.from_dict({"metadata": {"name": name}, "spec": spec})
        run = self.store.create(
            job, {}, "ada", team="a", backend="kubernetes", origin={"namespace": NS}, job_id=name
        )
        meta = {"namespace": NS, "name": name, "uid": f"uid-{name}", "generation": 1}
        cr = {"apiVersion": "aviflow.dev/v1", "kind": "TrainJob", "metadata": meta, "spec": spec}
        self.cell.trainjobs._put((NS, name), cr)
        return run

    def reconcile(self, name: str = "j1") -> list[tuple[str, str]]:
        """The calls one reconcile of job ``name`` makes: its creates (made at once, so in
        no set order) sorted, before the rest in their order."""
        del self.calls[:]
        self.ctl.reconcile(f"{NS}/{name}")
        assert all(a.released for a in self.answers)
        return ordered(self.calls)

    def job_seen(
        self, name: str, attempt: int, pending: str = "", admitted: str | None = None
    ) -> None:
        """The informers see attempt ``attempt``'s Job and its Workload, waiting (``pending``:
        Kueue's reason) or admitted (``admitted``: when, in RFC 3339)."""
        job_name = f"{name}-a{attempt}"
        labels = {m.LABEL_JOB: name, m.LABEL_ATTEMPT: str(attempt)}
        self.cell.jobs._put((NS, job_name), {"metadata": {"name": job_name, "labels": labels}})
        reserved = {"type": "QuotaReserved", "status": "False", "message": pending}
        if admitted is not None:
            reserved = {"type": "Admitted", "status": "True", "lastTransitionTime": admitted}
        wl = {
            "metadata": {
                "namespace": NS,
                "name": f"wl-{job_name}",
                "ownerReferences": [{"kind": "Job", "name": job_name}],
            },
            "spec": {"queueName": "q"},
            "status": {"conditions": [reserved] if pending or admitted else []},
        }
        self.cell.workloads._put((NS, f"wl-{job_name}"), wl)


def ordered(calls: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``calls``' creates sorted, then the rest in their order."""
    creates = [c for c in calls if c[0].startswith("create_")]
    return sorted(creates) + [c for c in calls if not c[0].startswith("create_")]


CREATED = [
    ("create_namespaced_job", "j1-a1"),
    ("create_namespaced_network_policy", "avf-j1"),
    ("create_namespaced_service", "avf-j1"),
]
PAIR = CREATED[1:]
PATCHED = [("patch_namespaced_custom_object_status", "j1")]


def test_a_trainjob_never_reconciled_goes_ahead_of_the_others(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    ctl = h.ctl

    def trainjob(name: str, state: str | None, generation: int = 1) -> dict[str, Any]:
        meta = {"namespace": NS, "name": name, "uid": f"u-{name}", "generation": generation}
        return {"metadata": meta, "status": {"state": state} if state else {}}

    ctl._on_trainjob(trainjob("old", "QUEUED"))
    ctl._on_child({"metadata": {"namespace": NS, "labels": {m.LABEL_JOB: "older"}}})
    ctl._on_trainjob(trainjob("new-1", None))
    ctl._on_trainjob(trainjob("running", "RUNNING", generation=2))
    ctl._on_trainjob({"metadata": trainjob("new-2", None)["metadata"]})  # no status at all
    ctl._on_trainjob(trainjob("done", "SUCCEEDED"))  # final: not queued at all
    assert ctl.queue.waiting == [f"{NS}/{n}" for n in ("new-1", "new-2", "old", "older", "running")]
    # its own status patch coming back queues nothing; a deleted one is not urgent
    ctl._on_trainjob(trainjob("new-1", "QUEUED"))
    ctl._on_trainjob({**trainjob("gone", None), "deleted": True})
    assert ctl.queue.waiting[-1] == f"{NS}/gone" and len(ctl.queue.waiting) == 6


def test_a_first_reconcile_creates_the_service_the_policy_and_the_job_once_and_at_once(
    tmp_path: Path,
) -> None:
    h = Harness(tmp_path)
    run = h.submit("j1")
    assert h.reconcile() == CREATED + PATCHED  # the action and the level: one Job made
    assert [(e.type, e.attempt) for e in run.events().items] == [(EventType.QUEUED, 0)]
    assert h.reconcile() == [("create_namespaced_job", "j1-a1")]  # the cache is behind: 409
    h.job_seen("j1", 1)
    assert h.reconcile() == []  # no create; its queue position waits queued_tick
    # attempt 1 failed and the job waits to restart: the next attempt's Job alone
    run.append_events(
        [Event(EventType.RESTARTING, 1, "node 0 failed", 2.0), Event(EventType.QUEUED, 1, "", 2.0)]
    )
    assert h.reconcile() == [("create_namespaced_job", "j1-a2"), *PATCHED]


def test_a_pair_already_there_is_not_created_again_and_a_refused_one_is(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.submit("j1")
    h.fail.update(create_namespaced_service=409, create_namespaced_network_policy=409)
    assert h.reconcile() == CREATED + PATCHED  # a controller that started: already there
    assert h.reconcile() == [("create_namespaced_job", "j1-a1")]
    h2 = Harness(tmp_path / "2")
    h2.submit("j1")
    h2.fail["create_namespaced_network_policy"] = 403
    with pytest.raises(ApiException):
        h2.reconcile()
    # the Job was made (suspended: no pod before Kueue admits it; the chart's policy shuts
    # in any trainer pod its own job's policy does not open) and every call was waited for
    assert ordered(h2.calls) == CREATED
    h2.job_seen("j1", 1)
    with pytest.raises(ApiException):  # the pair again, while the job waits: refused again
        h2.reconcile()
    assert ordered(h2.calls) == PAIR
    del h2.fail["create_namespaced_network_policy"]
    assert h2.reconcile() == [*PAIR, *PATCHED]
    assert h2.reconcile() == []  # made: remembered
    # a job already running when its pair is refused: made at its next reconcile
    h3 = Harness(tmp_path / "3")
    run = h3.submit("j1")
    h3.fail["create_namespaced_service"] = 500
    with pytest.raises(ApiException):
        h3.reconcile()
    h3.job_seen("j1", 1)
    run.append_events([Event(EventType.STARTING, 1, "", 2.0), Event(EventType.RUNNING, 1, "", 3.0)])
    with pytest.raises(ApiException):
        h3.reconcile()
    assert ordered(h3.calls) == PAIR
    del h3.fail["create_namespaced_service"]
    assert h3.reconcile()[:2] == PAIR
    assert not [c for c in h3.reconcile() if c[0].startswith("create_")]


def test_without_network_policies_the_job_and_its_service(tmp_path: Path) -> None:
    h = Harness(tmp_path, networkPolicy=False)
    h.submit("j1")
    assert h.reconcile() == [CREATED[0], CREATED[2], *PATCHED]
    assert h.reconcile() == [CREATED[0]]


def test_a_single_node_job_has_no_service(tmp_path: Path) -> None:
    """Its rank 0 is in its own pod: nothing to find, so no Service to write first."""
    h = Harness(tmp_path)
    h.submit("j1", nodes=1)
    assert h.reconcile() == [*CREATED[:2], *PATCHED]
    h.job_seen("j1", 1)
    assert h.reconcile() == []
    job = h.store.get("j1").spec()
    pod = m.attempt_job(job, m.JobRef("j1", "uid-j1", "ada"), 1, h.ctl.settings)["spec"]["template"]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert (
        "subdomain" not in pod["spec"]
        and env[MAIN_ADDR] == RuntimeEnv(run_dir=Path("/r")).main_addr
    )


def test_a_deleted_trainjob_is_forgotten(tmp_path: Path) -> None:
    """A TrainJob made again under the name of a deleted one gets its pair again (the
    deleted one's went with it)."""
    h = Harness(tmp_path)
    h.submit("j1")
    h.reconcile()
    cr = h.cell.trainjobs.get(NS, "j1")
    assert cr is not None and h.ctl.children._networked == {(NS, "j1"): "uid-j1"}
    h.ctl._on_trainjob({**cr, "deleted": True})
    assert h.ctl.children._networked == {}
    # remembered by uid: a pair made for one TrainJob is not another's of the same name
    del h.calls[:]
    for uid in ("uid-1", "uid-1", "uid-2"):
        h.ctl.children.ensure(h.cell, m.JobRef("j1", uid, "ada"), h.store.get("j1").spec())
    assert sorted(h.calls) == sorted(PAIR * 2)


def test_a_cancelled_or_failed_job_is_forgotten(tmp_path: Path) -> None:
    h = Harness(tmp_path, runtimes={"ib": {}})
    h.submit("j1", runtime="ib")
    h.submit("j2", runtime="ib")
    h.reconcile("j1")
    h.reconcile("j2")
    assert h.ctl.children._networked == {(NS, "j1"): "uid-j1", (NS, "j2"): "uid-j2"}
    cr = h.cell.trainjobs.get(NS, "j1")
    assert cr is not None
    cr["metadata"]["annotations"] = {m.ANNOTATION_CANCEL: "enough"}
    h.reconcile("j1")
    assert ("delete_namespaced_service", "avf-j1") in h.calls
    assert h.ctl.children._networked == {(NS, "j2"): "uid-j2"}
    # an admin removed the runtime j2 pinned: it fails before its Job is made
    h.cell.settings = ClusterSettings.from_dict({**h.raw, "runtimes": {"roce": {}}})
    h.reconcile("j2")
    assert h.store.get("j2").status().state is JobState.FAILED
    assert h.ctl.children._networked == {}


def test_the_queue_details_wait_queued_tick(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    run = h.submit("j1")
    h.reconcile()
    h.job_seen("j1", 1, pending="couldn't assign flavors: insufficient quota")
    assert h.reconcile() == [] and h.positions == []  # just queued: no visibility call
    assert (run.status().queue_position, run.status().message) == (None, "waiting for admission")
    h2 = Harness(tmp_path / "2")
    run = h2.submit("j1")
    run.append_events([Event(EventType.QUEUED, 0, "waiting for admission", time.time() - 5)])
    h2.job_seen("j1", 1, pending="insufficient quota")
    # waited queued_tick: shown (and a controller new to the job makes sure of its pair)
    assert h2.reconcile() == [*PAIR, *PATCHED] and h2.positions == ["q"]
    status = run.status()
    assert (status.queue_position, status.message) == (
        1,
        "waiting for admission: insufficient quota",
    )


def test_a_job_with_no_attempt_job_reads_no_heartbeat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's heartbeat only tells a started attempt's pods are up: before any attempt
    Job exists there is none to read (a first reconcile reads no file of the job's)."""
    read: list[int] = []
    real = RunDir.heartbeat

    def heartbeat(self: RunDir, node: int) -> dict[str, Any]:
        read.append(node)
        return real(self, node)

    monkeypatch.setattr(RunDir, "heartbeat", heartbeat)
    h = Harness(tmp_path)
    h.submit("j1", nodes=3)
    h.reconcile()
    assert read == []
    h.job_seen("j1", 1)
    h.reconcile()
    assert read == [0, 1, 2]


def test_a_new_jobs_first_status_patch_waits_and_one_admitted_by_then_is_patched_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst's first reconciles make the Jobs, not status patches (issue 28): a job admitted
    within ``first_status`` seconds gets one patch (STARTING), one still queued then gets
    QUEUED; the run directory's status is written at once either way."""
    h = Harness(tmp_path, first_status=FIRST_STATUS)
    run = h.submit("j1")
    assert h.reconcile() == CREATED  # no patch yet
    assert run.status().state is JobState.QUEUED  # status.json: at once
    h.job_seen("j1", 1)
    assert h.reconcile() == []
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now + FIRST_STATUS)
    assert h.reconcile() == PATCHED  # waited: shown
    # admitted within the wait: one patch, STARTING
    h2 = Harness(tmp_path / "2", first_status=FIRST_STATUS)
    monkeypatch.setattr(time, "time", lambda: now)
    run = h2.submit("j2")
    assert h2.reconcile("j2") == [
        ("create_namespaced_job", "j2-a1"),
        ("create_namespaced_network_policy", "avf-j2"),
        ("create_namespaced_service", "avf-j2"),
    ]
    h2.job_seen("j2", 1, admitted=datetime.fromtimestamp(now, UTC).isoformat())
    assert h2.reconcile("j2") == [("patch_namespaced_custom_object_status", "j2")]
    assert run.status().state is JobState.STARTING


def test_a_childs_event_queues_its_job_only_when_what_a_reconcile_reads_of_it_changed(
    tmp_path: Path,
) -> None:
    """A pod's or Workload's event that leaves its view (phase, exit code, admission...) as
    it was queues nothing; a new, changed or deleted one does, and so does one whose view
    cannot be read (a reconcile judges it)."""
    ctl = Harness(tmp_path).ctl
    labels = {m.LABEL_JOB: "j1", m.LABEL_ATTEMPT: "1"}

    def pod(phase: str, **status: Any) -> dict[str, Any]:
        meta = {"namespace": NS, "name": "j1-a1-0", "uid": "pod-1", "labels": labels}
        return {"metadata": meta, "status": {"phase": phase, **status}}

    def workload(*conditions: dict[str, str]) -> dict[str, Any]:
        meta = {
            "namespace": NS, "name": "wl-j1-a1", "uid": "wl-1",
            "ownerReferences": [{"kind": "Job", "name": "j1-a1"}],
        }  # fmt: skip
        return {"metadata": meta, "status": {"conditions": list(conditions)}}

    def queued(event: dict[str, Any], kind: str = "pod") -> bool:
        if kind == "pod":
            ctl._on_child(event, view=PodView.of)
        else:
            ctl._on_workload(event)
        waiting = ctl.queue.waiting
        for key in waiting:
            ctl.queue.take()
            ctl.queue.done(key)
        assert waiting in ([], [f"{NS}/j1"])
        return bool(waiting)

    ready = {"type": "Ready", "status": "True"}
    assert queued(pod("Pending"))  # new
    assert not queued(pod("Pending", conditions=[{"type": "PodScheduled", "status": "True"}]))
    assert queued(pod("Running"))
    assert not queued(pod("Running", conditions=[ready], podIP="10.0.0.7"))
    assert not queued(pod("Running"))  # a resync's hand-back
    assert queued(pod("Running", containerStatuses=[{"state": {"terminated": {"exitCode": 3}}}]))
    assert queued({**pod("Failed"), "deleted": True})
    assert queued(pod("Running"))  # the same uid again after its deletion: new
    hostile = pod("Running")
    hostile["metadata"] = {**hostile["metadata"], "uid": "pod-2"}
    hostile["metadata"]["annotations"] = {"batch.kubernetes.io/job-completion-index": "x"}
    assert queued(hostile) and queued(hostile)  # unreadable: never held back
    assert ctl.views.changed(hostile, view=lambda obj: 1 / 0)  # nor raised, whatever fails
    assert queued({"metadata": {"namespace": NS, "labels": labels}, "status": {}})  # no uid
    admitted = {"type": "Admitted", "status": "True", "lastTransitionTime": "2026-12-05T00:00:00Z"}
    assert queued(workload(), "workload")
    assert not queued(workload({"type": "PodsReady", "status": "False"}), "workload")
    assert queued(workload(admitted), "workload")
    assert not queued(workload(admitted, {"type": "PodsReady", "status": "True"}), "workload")
    assert len(ctl.views) == 2  # pod-1 and the Workload: no unreadable one is kept
