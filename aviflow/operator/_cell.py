"""The informers of one jobs' namespace: its TrainJobs, and their Jobs, pods and Kueue
Workloads, indexed by the TrainJob they belong to (:func:`job_label`, :func:`owner_jobs`).

Finished TrainJobs stay until someone deletes them, so the TrainJob cache holds a namespace's
whole history; what the controller still does with a finished one is look at its state, its
identity and its annotations (a pending submission's token). So the cache keeps only those
of it (:func:`trim`), indexes the others under :data:`ACTIVE` (:func:`activity`), and a
resync and the ticker go through that index: history costs the controller a small object
each, and no time at a resync or a tick (``bench/controller_history.py``)."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.kueue import owner_job
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._informer import Informer, Obj
from aviflow.operator._observe import AttemptJob, PodView
from aviflow.records import JobState

if TYPE_CHECKING:
    from aviflow.operator._controller import Controller


FINAL = frozenset({JobState.SUCCEEDED.value, JobState.FAILED.value, JobState.CANCELLED.value})
ACTIVE = "active"  # the TrainJob index's key of those not finished
# what the controller reads of a finished TrainJob: its key, what a change is told by (uid,
# generation, the cancel annotation, deletionTimestamp), the submissions' sweep its token
KEPT_METADATA = (
    "name", "namespace", "uid", "generation", "resourceVersion", "deletionTimestamp",
    "annotations",
)  # fmt: skip


def final(cr: Obj) -> bool:
    """The TrainJob's status is final: the controller wrote it last, after everything else."""
    return (cr.get("status") or {}).get("state") in FINAL


def activity(cr: Obj) -> list[str]:
    """Index of TrainJobs: :data:`ACTIVE` unless finished."""
    return [] if final(cr) else [ACTIVE]


def trim(cr: Obj) -> Obj:
    """What the cache keeps of a TrainJob: all but ``managedFields`` (which nothing here
    reads); of a finished one, its identity, annotations and state alone (about 2 KiB in
    this process, where the whole object takes 7).

    >>> trim({"metadata": {"name": "a", "managedFields": [{}]}, "spec": {"nodes": 2},
    ...       "status": {"state": "SUCCEEDED", "failure": {"traceback": "..."}}})
    {'metadata': {'name': 'a'}, 'status': {'state': 'SUCCEEDED'}}
    >>> trim({"metadata": {"name": "b", "managedFields": [{}]}, "spec": {"nodes": 2}})
    {'metadata': {'name': 'b'}, 'spec': {'nodes': 2}}
    """
    meta = cr.get("metadata") or {}
    if not final(cr):
        if "managedFields" not in meta:
            return cr
        return {**cr, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    kept = {k: meta[k] for k in KEPT_METADATA if k in meta}
    out: Obj = {k: cr[k] for k in ("apiVersion", "kind") if k in cr}
    return {**out, "metadata": kept, "status": {"state": cr["status"]["state"]}}


def job_label(obj: Obj) -> list[str]:
    """Index of Jobs and Pods: the TrainJob they belong to."""
    job_id = (obj["metadata"].get("labels") or {}).get(m.LABEL_JOB)
    return [job_id] if job_id else []


def owner_jobs(obj: Obj) -> list[str]:
    """Index of Workloads: the Job that owns them."""
    name = owner_job(obj)
    return [name] if name else []


class ChildViews:
    """What a reconcile reads of each of the jobs' Jobs, pods and Workloads (their views:
    :class:`AttemptJob`, :class:`PodView`, :class:`WorkloadView`) as their last event showed
    it, by uid. An event that leaves a child's view as it was (a pod's conditions or IP, a
    Job's counts, an informer's resync hand-back) queues no reconcile: the one it would make
    reads what the last one read. A new or deleted child, or one whose view cannot be read
    (whatever the error), always does; the ticker still reconciles every job not finished."""

    def __init__(self) -> None:
        self._views: dict[str, Any] = {}

    def changed(self, obj: Obj, view: Callable[[Obj], Any]) -> bool:
        uid = obj["metadata"].get("uid")
        if obj.get("deleted") or not uid:
            self._views.pop(uid, None)
            return True
        try:
            seen = view(obj)
        except Exception:  # never raised into the informer (it would relist): a reconcile judges
            self._views.pop(uid, None)
            return True
        if self._views.get(uid) == seen:
            return False
        self._views[uid] = seen
        return True

    def __len__(self) -> int:
        return len(self._views)


class Cell:
    """The informers of one jobs' namespace (TrainJobs, their Jobs, pods and Workloads)
    and the settings the builders place objects there with."""

    def __init__(self, ns: str, settings: ClusterSettings, ctl: Controller, resync: float) -> None:
        self.ns, self.settings = ns, settings
        selector = m.LABEL_JOB
        self.trainjobs = Informer(
            f"trainjobs/{ns}",
            ctl.custom.list_namespaced_custom_object,
            ctl._on_trainjob,
            resync=resync,
            index=activity,
            transform=trim,
            resync_key=ACTIVE,
            group=GROUP,
            version=VERSION,
            namespace=ns,
            plural=PLURAL,
        )
        self.jobs = Informer(
            f"jobs/{ns}",
            ctl.batch.list_namespaced_job,
            partial(ctl._on_child, view=AttemptJob.of),
            resync=resync,
            index=job_label,
            namespace=ns,
            label_selector=selector,
        )
        self.pods = Informer(
            f"pods/{ns}",
            ctl.core.list_namespaced_pod,
            partial(ctl._on_child, view=PodView.of),
            resync=resync,
            index=job_label,
            namespace=ns,
            label_selector=selector,
        )
        self.workloads = Informer(
            f"workloads/{ns}",
            ctl.custom.list_namespaced_custom_object,
            ctl._on_workload,
            resync=resync,
            index=owner_jobs,
            group="kueue.x-k8s.io",
            version="v1beta2",
            namespace=ns,
            plural="workloads",
        )
        self.informers = [self.trainjobs, self.jobs, self.pods, self.workloads]
