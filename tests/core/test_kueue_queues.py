"""Kueue's queues as the queue record (aviflow.k8s.kueue, pure): a LocalQueue, its
ClusterQueue, what its cohort lends it and its waiting workloads in Kueue's order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aviflow.backends import kubernetes as kubernetes_backend
from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.k8s.kueue import cohort_gpus_lendable, queue_quota
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import PendingJob, QueueQuota


def cluster_queue(
    name: str,
    cohort: str | None,
    flavors: list[dict[str, Any]],
    used: list[str],
    borrowed: str = "0",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "nvidia.com/gpu"],
                "flavors": [
                    {"name": f"f{i}", "resources": [{"name": "cpu", "nominalQuota": "64"}, gpu]}
                    for i, gpu in enumerate(flavors)
                ],
            }
        ]
    }
    if cohort:
        spec["cohortName"] = cohort
    usage = [
        {
            "name": f"f{i}",
            "resources": [{"name": "nvidia.com/gpu", "total": u, "borrowed": borrowed}],
        }
        for i, u in enumerate(used)
    ]
    return {"metadata": {"name": name}, "spec": spec, "status": {"flavorsUsage": usage}}


def gpu(nominal: str, lend: str | None = None) -> dict[str, Any]:
    res: dict[str, Any] = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    if lend is not None:
        res["lendingLimit"] = lend
    return res


POOL = [
    # two flavors: 8 + 8 GPUs, lends at most 4 of each (keeps 8), uses 6 of its own
    cluster_queue("vision", "research", [gpu("8", "4"), gpu("8", "4")], ["4", "2"]),
    cluster_queue("nlp", "research", [gpu("16")], ["20"], borrowed="4"),
    cluster_queue("speech", "research", [gpu("4", "0")], ["0"]),  # lends nothing
    cluster_queue("solo", None, [gpu("8")], ["1"]),
]


def test_what_each_cohort_lends_each_clusterqueue() -> None:
    # vision lends 8 (none of it used: it holds 6 of the 8 it keeps), nlp lends 0 idle
    # (it holds 20 of its 16); nlp borrows 4 of vision's 8
    assert cohort_gpus_lendable(POOL) == {"vision": 0, "nlp": 4, "speech": 4, "solo": 0}


def test_a_local_queue_with_its_cohort_and_waiting_jobs_in_kueues_order() -> None:
    lq = {"metadata": {"name": "team-a"}, "status": {"pendingWorkloads": 3}}
    pending = [  # the visibility API's order; one workload is not an Aviflow job
        {"metadata": {"name": "w-2"}, "positionInLocalQueue": 0},
        {"metadata": {"name": "plain"}, "positionInLocalQueue": 1},
        {"metadata": {"name": "w-1"}, "positionInLocalQueue": 2},
    ]
    jobs = {"w-1": ("job-1", "alice", 8), "w-2": ("job-2", "bob", 4)}
    record = queue_quota(
        lq, POOL[1], pending, lambda w: jobs.get(w["metadata"]["name"]), lendable=4
    )
    assert record == QueueQuota(
        queue="team-a",
        gpu_quota=16,
        gpus_in_use=20,
        pending_count=3,
        borrowed=4,
        pending=(PendingJob("job-2", "bob", 1, 4), PendingJob("job-1", "alice", 3, 8)),
        lendable=4,
    )


class FakeKueue:
    """The two custom-object reads KubernetesBackend.queues makes, from a list (``listing``:
    whether the ClusterQueues may be listed, else only read one by one)."""

    def __init__(self, cluster_queues: list[dict[str, Any]], listing: bool = True) -> None:
        self.cluster_queues, self.listing = cluster_queues, listing

    def list_namespaced_custom_object(self, group: str, version: str, ns: str, plural: str) -> Any:
        assert (group, plural) == ("kueue.x-k8s.io", "localqueues")
        lq = {"metadata": {"name": "team-a", "namespace": ns}, "spec": {"clusterQueue": "nlp"}}
        return {"items": [{**lq, "status": {"pendingWorkloads": 0}}]}

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> Any:
        from kubernetes.client.exceptions import ApiException

        if not self.listing:
            raise ApiException(status=403, reason="Forbidden")
        return {"items": self.cluster_queues}

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> Any:
        return next(cq for cq in self.cluster_queues if cq["metadata"]["name"] == name)


def test_the_backend_reads_every_clusterqueue_once_for_the_cohorts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = ClusterSettings.from_dict({"runs": {"localPath": str(tmp_path)}})
    backend = KubernetesBackend(settings, api=object())
    monkeypatch.setattr(kubernetes_backend, "pending_workloads", lambda api, ns, lq: None)
    kueue = FakeKueue(POOL)
    monkeypatch.setattr(backend, "_custom", lambda: kueue)
    [record] = backend.queues()
    assert (record.queue, record.gpu_quota, record.gpus_in_use, record.borrowed) == (
        "team-a",
        16,
        20,
        4,
    )
    assert (record.lendable, record.pending) == (4, ())  # no visibility API: no order here
    kueue.listing = False  # without the list rule: its own ClusterQueue, no cohort known
    [record] = backend.queues()
    assert (record.gpu_quota, record.borrowed, record.lendable) == (16, 4, 0)
