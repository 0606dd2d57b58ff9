"""A job's objects on the cluster, as the controller creates and deletes them: its headless
Service (a job of several nodes: :func:`aviflow.k8s.manifests.has_service`) and NetworkPolicy
(one each per job), "the pair", and each attempt's Job.

A job's first attempt Job is created at the same time as its Service and NetworkPolicy (three
calls at once, not one after another: the API server's answer is most of what the controller
adds to a submission's way to admission, ``bench/admission.py``). No pod of the job runs
before its policy exists for all that: the Job is created suspended, so it has no pod until
Kueue admits it, and the chart's ``<release>-trainers`` policy (there whenever the settings
make per-job policies: both follow the chart's ``networkPolicy``) denies every trainer pod
all traffic but what its own job's policy opens, so a pod that ran first would be shut in, not
open. A pair that was refused is created again at the job's next reconcile while it is queued,
starting or running (a job's pods cannot reach each other without it). Each is created once
per job and process: :class:`Children` remembers the jobs whose pair it created (or found
there: a ``409``), by TrainJob uid, and an attempt after that creates its Job alone. It
forgets a job when it deletes its children (a cancel), when the TrainJob is deleted and when
its status is final (a TrainJob made again under the same name has another uid: its pair,
which the old one's deletion took with it, is made again); a controller that starts (or takes
the lease over) remembers nothing, so it creates them again (``409``: already there) at its
first reconcile of each job queued, starting or running.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kubernetes.client.exceptions import ApiException

from aviflow.k8s import manifests as m
from aviflow.operator._reads import API_TIMEOUT

if TYPE_CHECKING:
    from aviflow.operator._cell import Cell
    from aviflow.operator._controller import Controller
    from aviflow.spec import TrainJob


class Children:
    """Creates and deletes the objects of the controller ``ctl``'s jobs, through its API
    clients and behind its fence (``ctl._guard``)."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl
        self._lock = threading.Lock()
        self._networked: dict[tuple[str, str], str] = {}  # (namespace, job id) -> uid
        # a reconcile's calls beside its own (two per worker at most: the pair)
        self._calls = ThreadPoolExecutor(2 * max(1, ctl.workers), thread_name_prefix="create")

    def close(self) -> None:
        self._calls.shutdown(wait=True)

    def create(self, call: Any, body: dict[str, Any]) -> None:
        """``call(namespace, body)``; ``409`` (already there: a reconcile before us made it)
        is not an error. The answer is read and dropped, not decoded into the client's
        models (a Job's costs ~10 ms of CPU)."""
        self.ctl._guard()
        try:
            answer = call(
                body["metadata"]["namespace"],
                body,
                _request_timeout=API_TIMEOUT,
                _preload_content=False,
            )
        except ApiException as exc:
            if exc.status != 409:
                raise
        else:
            answer.drain_conn()
            answer.release_conn()

    def _pair(self, cell: Cell, ref: m.JobRef, job: TrainJob) -> list[tuple[Any, dict[str, Any]]]:
        """The creates of the job's Service (a job of several nodes) and NetworkPolicy (when
        the settings want one); none when this process made them already."""
        with self._lock:
            if self._networked.get((cell.ns, ref.id)) == ref.uid:
                return []
        calls: list[tuple[Any, dict[str, Any]]] = []
        if m.has_service(job):
            calls.append((self.ctl.core.create_namespaced_service, m.service(ref, cell.settings)))
        if cell.settings.network_policy:
            policy = m.network_policy(ref, cell.settings)
            calls.append((self.ctl.net.create_namespaced_network_policy, policy))
        return calls

    def ensure(
        self, cell: Cell, ref: m.JobRef, job: TrainJob, attempt: dict[str, Any] | None = None
    ) -> None:
        """The Service and NetworkPolicy of ``job``, unless this process made them already,
        and ``attempt`` (an attempt Job's body) if given: all at once (see the module
        docstring). Every call is made, and waited for, even when one fails; then the first
        failure is raised. The pair is remembered only when both were made."""
        pair = self._pair(cell, ref, job)
        calls = [self._calls.submit(self.create, call, body) for call, body in pair]
        failure: Exception | None = None
        if attempt is not None:
            try:
                self.create(self.ctl.batch.create_namespaced_job, attempt)
            except Exception as exc:  # raised once the pair's calls are done
                failure = exc
        failures = [exc for exc in (c.exception() for c in calls) if exc is not None]
        if pair and not failures:
            with self._lock:
                self._networked[(cell.ns, ref.id)] = ref.uid
        if failure is not None or failures:
            raise failure or failures[0]

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
