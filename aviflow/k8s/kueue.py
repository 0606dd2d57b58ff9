"""Reading Kueue: queues, quotas and who waits where.

:func:`pending_workloads` asks Kueue's visibility API (``visibility.kueue.x-k8s.io/v1beta2``,
served through the API server's aggregation layer) for a LocalQueue's waiting workloads in
Kueue's own order; it returns None where that API is not served, and callers then derive
positions from the Workload objects (:func:`aviflow.operator._observe.queue_positions`).
:func:`queue_quota` is pure: a LocalQueue, its ClusterQueue and its pending list -> the
:class:`~aviflow.records.QueueQuota` record every backend returns; :func:`cohort_gpus_lendable`
(pure) adds what each ClusterQueue's cohort lends it now.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aviflow._units import parse_quantity
from aviflow.estimate import cohort_lendable
from aviflow.k8s.forecast import cq_usage, queue_limits
from aviflow.records import PendingJob, QueueQuota

KUEUE_GROUP, KUEUE_VERSION = "kueue.x-k8s.io", "v1beta2"
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
REQUEST_TIMEOUT = 5.0  # an aggregated API whose server is down must not hold up a caller


def pending_workloads(api: Any, namespace: str, local_queue: str) -> list[dict[str, Any]] | None:
    """The LocalQueue's pending workloads, first in line first (each with
    ``positionInLocalQueue``, 0-based), or None where the visibility API is not served."""
    from kubernetes.client.exceptions import ApiException

    path = f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads"
    request = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(*request, _request_timeout=REQUEST_TIMEOUT)
    response.read()
    if response.status in (404, 503):
        return None
    try:
        data = api.response_deserialize(response, {"200": "object"}).data
    except ApiException as exc:
        if exc.status in (404, 503):
            return None
        raise
    items = (data or {}).get("items") or []
    return sorted(items, key=lambda i: int(i.get("positionInLocalQueue", 0)))


def gpu_amount(resources: Mapping[str, Any] | None, gpu_resource: str) -> int:
    if not resources or gpu_resource not in resources:
        return 0
    return int(parse_quantity(resources[gpu_resource]))


def cluster_queue_gpus(cq: Mapping[str, Any], gpu_resource: str) -> tuple[int, int, int]:
    """(nominal GPU quota, GPUs in use, of which borrowed) of a ClusterQueue."""
    nominal = 0
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == gpu_resource:
                    nominal += int(parse_quantity(res.get("nominalQuota", 0)))
    used = borrowed = 0
    for flavor in (cq.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == gpu_resource:
                used += int(parse_quantity(res.get("total", 0)))
                borrowed += int(parse_quantity(res.get("borrowed", 0)))
    return nominal, used, borrowed


def queue_quota(
    local_queue: Mapping[str, Any],
    cluster_queue: Mapping[str, Any],
    pending: list[dict[str, Any]],
    who: Callable[[dict[str, Any]], tuple[str, str, int] | None],
    gpu_resource: str = "nvidia.com/gpu",
    lendable: int = 0,
) -> QueueQuota:
    """The queue record of a LocalQueue. ``who(workload)`` names a pending workload's job
    (id, user, GPUs), or None for a workload that is not an Aviflow job; ``lendable``: what
    its cohort lends it now (:func:`cohort_gpus_lendable`)."""
    nominal, used, borrowed = cluster_queue_gpus(cluster_queue, gpu_resource)
    jobs: list[PendingJob] = []
    for item in pending:
        found = who(item)
        if found is not None:
            job_id, user, gpus = found
            position = int(item.get("positionInLocalQueue", len(jobs))) + 1
            jobs.append(PendingJob(job_id, user, position=position, gpus=gpus))
    status = local_queue.get("status") or {}
    return QueueQuota(
        queue=local_queue["metadata"]["name"],
        gpu_quota=nominal,
        gpus_in_use=used,
        pending_count=int(status.get("pendingWorkloads", len(pending))),
        borrowed=borrowed,
        pending=tuple(jobs),
        lendable=lendable,
    )


def cohort_gpus_lendable(
    cluster_queues: Sequence[Mapping[str, Any]], gpu_resource: str = "nvidia.com/gpu"
) -> dict[str, int]:
    """For each ClusterQueue by name, the GPUs idle in its cohort that the others lend it now
    (their ``nominalQuota`` up to their ``lendingLimit``, less what their status says they
    use): :func:`aviflow.estimate.cohort_lendable` over every ClusterQueue read at once.

    >>> def cq(name, nominal, used, lend=None):
    ...     res = {"name": "nvidia.com/gpu", "nominalQuota": nominal}
    ...     res.update({"lendingLimit": lend} if lend is not None else {})
    ...     return {"metadata": {"name": name}, "spec": {"cohortName": "research",
    ...             "resourceGroups": [{"flavors": [{"resources": [res]}]}]},
    ...             "status": {"flavorsUsage": [{"resources": [
    ...                 {"name": "nvidia.com/gpu", "total": used}]}]}}
    >>> cohort_gpus_lendable([cq("vision", 8, 8), cq("nlp", 8, 2, lend="4")])
    {'vision': 4, 'nlp': 0}
    """
    limits = [queue_limits(cq, gpu_resource) for cq in cluster_queues]
    use = {q.name: cq_usage(cq, gpu_resource) for q, cq in zip(limits, cluster_queues, strict=True)}
    return {q.name: cohort_lendable(q.name, limits, use) for q in limits}


def owner_job(workload: Mapping[str, Any]) -> str | None:
    """The name of the Job a Workload belongs to."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "Job":
            return str(ref.get("name"))
    return None
