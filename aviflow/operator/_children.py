"""A job's objects on the cluster, as the controller creates and deletes them: its headless
Service and NetworkPolicy (one each per job) and each attempt's Job.

The Service and the NetworkPolicy are created before every attempt Job (the policy must be
there before any of the job's pods runs: never the Job first). Each is created once per job
and process: :class:`Children` remembers the jobs whose pair it created (or found there: a
``409``), by TrainJob uid, and an attempt after that creates its Job alone. It forgets a job
when it deletes its children (a cancel), when the TrainJob is deleted and when its status is
final (a TrainJob made again under the same name has another uid: its pair, which the old
one's deletion took with it, is made again); a controller that starts (or takes the lease
over) remembers nothing, so it creates them again (``409``: already there) before its first
attempt Job of each job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from aviflow.k8s import manifests as m
from aviflow.operator._reads import API_TIMEOUT

if TYPE_CHECKING:
    from aviflow.operator._cell import Cell
    from aviflow.operator._controller import Controller


class Children:
    """Creates and deletes the objects of the controller ``ctl``'s jobs, through its API
    clients and behind its fence (``ctl._guard``)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._lock = threading.Lock()
        self._networked: dict[tuple[str, str], str] = {}  # (namespace, job id) -> uid

    def create(self, call: Any, body: dict[str, Any]) -> None:
        """``call(namespace, body)``; ``409`` (already there: a reconcile before us made it)
        is not an error."""
        self.ctl._guard()
        try:
            call(body["metadata"]["namespace"], body, _request_timeout=API_TIMEOUT)
        except ApiException as exc:
            if exc.status != 409:
                raise

    def ensure_network(self, cell: Cell, ref: m.JobRef) -> None:
        """The job's Service, then its NetworkPolicy (when the settings want one), unless
        this process made them already."""
        key = (cell.ns, ref.id)
        with self._lock:
            if self._networked.get(key) == ref.uid:
                return
        self.create(self.ctl.core.create_namespaced_service, m.service(ref, cell.settings))
        if cell.settings.network_policy:
            policy = m.network_policy(ref, cell.settings)
            self.create(self.ctl.net.create_namespaced_network_policy, policy)
        with self._lock:
            self._networked[key] = ref.uid

    def forget(self, namespace: str, job_id: str) -> None:
        """The job's Service and NetworkPolicy are to be created again before its next Job."""
        with self._lock:
            self._networked.pop((namespace, job_id), None)

    def delete_job(self, ns: str, name: str) -> None:
        self.ctl._guard()
        try:
            self.ctl.batch.delete_namespaced_job(
                name, ns, propagation_policy="Background", _request_timeout=API_TIMEOUT
            )
        except ApiException as exc:
            if exc.status != 404:
                raise

    def delete(self, cell: Cell, job_id: str) -> None:
        """Every object of the job: its attempt Jobs, its Service and NetworkPolicy."""
        self.forget(cell.ns, job_id)
        for obj in cell.jobs.by(job_id):
            if not obj["metadata"].get("deletionTimestamp"):
                self.delete_job(cell.ns, obj["metadata"]["name"])
        deletes: list[Callable[..., object]] = [self.ctl.core.delete_namespaced_service]
        if self.ctl.settings.network_policy:
            deletes.append(self.ctl.net.delete_namespaced_network_policy)
        for delete in deletes:
            self.ctl._guard()
            try:
                delete(m.service_name(job_id), cell.ns, _request_timeout=API_TIMEOUT)
            except ApiException as exc:
                if exc.status != 404:
                    raise
