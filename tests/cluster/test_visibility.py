"""Kueue's visibility API through the API server's aggregation layer.

Three Indexed Jobs of 8 GPUs each go to a ClusterQueue with 8 GPUs: the first is
admitted, the other two wait. ``visibility.kueue.x-k8s.io/v1beta2`` lists the two
waiting Workloads with their 0-based positions, in creation order, for the
LocalQueue and for the ClusterQueue, through the Python client and ``kubectl get
--raw`` alike (both go to kube-apiserver, which proxies to Kueue's visibility
server; see tests/cluster/README.md).
"""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest
from kubernetes import client

from aviflow_testcluster import GPU_RESOURCE, GPU_TOLERATION, LABEL_POOL, wait_for

pytestmark = pytest.mark.cluster

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"


def gpu_job(name: str, queue: str, *, pods: int, gpus_per_pod: int) -> dict:
    """An Indexed Job for ``queue`` whose pods sleep; Kueue creates it suspended."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "ignored.example/trainer:latest",
                            "command": ["python", "-c", "import time; time.sleep(300)"],
                            "resources": {
                                "requests": {
                                    "cpu": "1",
                                    "memory": "1Gi",
                                    GPU_RESOURCE: str(gpus_per_pod),
                                },
                                "limits": {GPU_RESOURCE: str(gpus_per_pod)},
                            },
                        }
                    ],
                },
            },
        },
    }


@pytest.fixture
def small_queue(k8s_cluster, k8s_namespace):
    """A ResourceFlavor, a ClusterQueue with 8 GPUs and a LocalQueue ``gpus``."""
    name = f"vis-{uuid.uuid4().hex[:8]}"
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": {LABEL_POOL: "hgx"}, "tolerations": [GPU_TOLERATION]},
    }
    cq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "64"},
                                {"name": "memory", "nominalQuota": "256Gi"},
                                {"name": GPU_RESOURCE, "nominalQuota": "8"},
                            ],
                        }
                    ],
                }
            ],
        },
    }
    lq = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gpus", "namespace": k8s_namespace},
        "spec": {"clusterQueue": name},
    }
    with k8s_cluster.api_client() as api:
        co = client.CustomObjectsApi(api)
        co.create_cluster_custom_object(*KUEUE, "resourceflavors", flavor)
        co.create_cluster_custom_object(*KUEUE, "clusterqueues", cq)
        co.create_namespaced_custom_object(*KUEUE, k8s_namespace, "localqueues", lq)
        try:
            wait_for(
                lambda: any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in co.get_cluster_custom_object(*KUEUE, "clusterqueues", name)
                    .get("status", {})
                    .get("conditions", [])
                ),
                30,
                "ClusterQueue Active",
            )
            yield {"cluster_queue": name, "local_queue": "gpus", "namespace": k8s_namespace}
        finally:
            # The namespace (Jobs, LocalQueue) goes with k8s_namespace; the ClusterQueue
            # keeps a finalizer until its workloads are gone, so do not wait for it.
            for plural in ("clusterqueues", "resourceflavors"):
                try:
                    co.delete_cluster_custom_object(*KUEUE, plural, name)
                except client.ApiException as e:
                    if e.status != 404:
                        raise


def workload_of(co: client.CustomObjectsApi, ns: str, job_uid: str) -> dict | None:
    items = co.list_namespaced_custom_object(
        *KUEUE, ns, "workloads", label_selector=f"{JOB_UID_LABEL}={job_uid}"
    )["items"]
    return items[0] if items else None


def get_json(api: client.ApiClient, path: str, **query: int) -> dict:
    """GET ``path`` (a path the generated APIs do not cover) with the client's credentials."""
    request = api.param_serialize(
        "GET",
        path,
        query_params=list(query.items()),
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    response = api.call_api(*request)
    response.read()
    return api.response_deserialize(response, {"200": "object"}).data


def positions(summary: dict) -> list[tuple[str, str, int, int]]:
    return [
        (
            it["metadata"]["name"],
            it["localQueueName"],
            it["positionInClusterQueue"],
            it["positionInLocalQueue"],
        )
        for it in summary["items"]
    ]


def test_pending_workloads_positions(k8s_cluster, small_queue):
    ns, lq, cq = small_queue["namespace"], small_queue["local_queue"], small_queue["cluster_queue"]
    lq_path = f"{VISIBILITY}/namespaces/{ns}/localqueues/{lq}/pendingworkloads"
    cq_path = f"{VISIBILITY}/clusterqueues/{cq}/pendingworkloads"
    with k8s_cluster.api_client() as api:
        batch = client.BatchV1Api(api)
        co = client.CustomObjectsApi(api)
        workloads = []
        for i, name in enumerate(("first", "second", "third")):
            job = batch.create_namespaced_job(ns, gpu_job(name, lq, pods=2, gpus_per_pod=4))
            assert job.spec.suspend is True  # Kueue's webhook suspends it
            wl = wait_for(
                lambda uid=job.metadata.uid: workload_of(co, ns, uid), 30, f"{name} workload"
            )
            workloads.append(wl["metadata"]["name"])
            if i == 0:
                wait_for(
                    lambda: batch.read_namespaced_job("first", ns).spec.suspend is False,
                    30,
                    "first job admitted",
                )
            elif name == "second":
                # Kueue orders equal priorities by the Workload's creationTimestamp
                # (whole seconds), then by UID: keep the waiting ones a second apart.
                created = dt.datetime.fromisoformat(wl["metadata"]["creationTimestamp"])
                wait_for(
                    lambda c=created: dt.datetime.now(dt.UTC) >= c + dt.timedelta(seconds=1.1),
                    5,
                    "the next creation second",
                    interval=0.05,
                )
        _, second, third = workloads
        expected = [(second, lq, 0, 0), (third, lq, 1, 1)]

        # Kueue adds a Workload to its queue once it has seen it; wait for both.
        wait_for(lambda: len(get_json(api, lq_path)["items"]) == 2, 30, "two pending workloads")
        by_lq = get_json(api, lq_path)
        assert by_lq["kind"] == "PendingWorkloadsSummary"
        assert positions(by_lq) == expected
        assert all(it["metadata"]["namespace"] == ns for it in by_lq["items"])
        assert positions(get_json(api, cq_path)) == expected
        assert positions(get_json(api, cq_path, limit=1, offset=1)) == expected[1:]

        # The first one still holds the whole quota.
        for name in ("second", "third"):
            assert batch.read_namespaced_job(name, ns).spec.suspend is True

    raw = json.loads(k8s_cluster.kubectl("get", "--raw", lq_path).stdout)
    assert positions(raw) == expected
    raw = json.loads(k8s_cluster.kubectl("get", "--raw", cq_path).stdout)
    assert positions(raw) == expected

    missing = k8s_cluster.kubectl(
        "get", "--raw", f"{VISIBILITY}/clusterqueues/{cq}-missing/pendingworkloads", check=False
    )
    assert missing.returncode != 0
    assert "not found" in missing.stderr
