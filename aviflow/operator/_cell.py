"""The informers of one jobs' namespace: its TrainJobs, and their Jobs, pods and Kueue
Workloads, indexed by the TrainJob they belong to (:func:`job_label`, :func:`owner_jobs`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.kueue import owner_job
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._informer import Informer, Obj

if TYPE_CHECKING:
    from aviflow.operator._controller import Controller


def job_label(obj: Obj) -> list[str]:
    """Index of Jobs and Pods: the TrainJob they belong to."""
    job_id = (obj["metadata"].get("labels") or {}).get(m.LABEL_JOB)
    return [job_id] if job_id else []


def owner_jobs(obj: Obj) -> list[str]:
    """Index of Workloads: the Job that owns them."""
    name = owner_job(obj)
    return [name] if name else []


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
            group=GROUP,
            version=VERSION,
            namespace=ns,
            plural=PLURAL,
        )
        self.jobs = Informer(
            f"jobs/{ns}",
            ctl.batch.list_namespaced_job,
            ctl._on_child,
            resync=resync,
            index=job_label,
            namespace=ns,
            label_selector=selector,
        )
        self.pods = Informer(
            f"pods/{ns}",
            ctl.core.list_namespaced_pod,
            ctl._on_child,
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
