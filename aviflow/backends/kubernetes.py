"""``KubernetesBackend``: jobs are TrainJob resources on a cluster with Kueue.

``submit`` writes the job's directory in the shared run store (spec, code bundle, meta),
then creates the TrainJob named by the job's id; the controller (``python -m
aviflow.operator``) does the rest and is the only writer of the job's events. A TrainJob the
API server refuses leaves nothing behind (the directory is removed). Reads come from the
run store as with the local backend (metrics, per-rank logs and checkpoints are written
there by the pods); ``request_cancel`` asks the controller through the TrainJob's
``aviflow.dev/cancel`` annotation, and ``cancel`` then waits until the job has ended.
``render`` is the exact objects (``--dry-run``).

Every call to the API server has a timeout (``apiTimeout``, default 5 s to connect and 30 s
for the answer; :func:`~aviflow.k8s.client.api_client`): an API server that does not answer
in time is a :class:`~aviflow.errors.BackendUnavailable` saying so (503 in aviflow-api).

Settings (one section: ``api.kubernetes`` in the hub config, or a YAML file named by
``AVIFLOW_K8S_CONFIG``): :class:`~aviflow.k8s.settings.ClusterSettings` plus ``kubeconfig``
and ``context`` (default: ``KUBECONFIG``, then in-cluster) and ``apiTimeout``
(:class:`~aviflow.k8s.settings.ApiTimeout`).
"""

from __future__ import annotations

import getpass
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aviflow.backends._store import StoreReads
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import AviflowError, BackendError
from aviflow.k8s import manifests as m
from aviflow.k8s.client import api_client, unreachable
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION, owner_job, pending_workloads, queue_quota
from aviflow.k8s.settings import ApiTimeout, ClusterSettings
from aviflow.names import slugify
from aviflow.records import JobStatus, Owner, QueueQuota, TrainerImage
from aviflow.spec import TrainJob
from aviflow.store import RunStore

CONFIG_ENV = "AVIFLOW_K8S_CONFIG"
RUNS_MOUNT_ENV = "AVIFLOW_RUNS_MOUNT"
CANCEL_WAIT = 120.0


class KubernetesBackend(StoreReads, Backend):
    """TrainJobs on Kubernetes + Kueue; see the module docstring."""

    name = "kubernetes"

    def __init__(
        self,
        settings: ClusterSettings | None = None,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        api: Any = None,
        api_timeout: ApiTimeout | None = None,
    ) -> None:
        self.settings = settings or ClusterSettings()
        root = self.settings.runs.local_path or os.environ.get(RUNS_MOUNT_ENV)
        self.store = RunStore(root)
        self._api = api
        self._kubeconfig, self._context = kubeconfig, context
        self.api_timeout = api_timeout or ApiTimeout()

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None = None) -> KubernetesBackend:
        data = dict(section or {})
        if not data and os.environ.get(CONFIG_ENV):
            return cls(ClusterSettings.load(os.environ[CONFIG_ENV]))
        kubeconfig, context = data.pop("kubeconfig", None), data.pop("context", None)
        timeout = ApiTimeout.from_dict(data.pop("apiTimeout", None))
        return cls(
            ClusterSettings.from_dict(data),
            kubeconfig=kubeconfig,
            context=context,
            api_timeout=timeout,
        )

    def __repr__(self) -> str:
        return f"KubernetesBackend(namespace={self.settings.namespace!r}, store={str(self.store.root)!r})"

    @property
    def api(self) -> Any:
        if self._api is None:
            self._api = api_client(self._kubeconfig, self._context, timeout=self.api_timeout)
        return self._api

    @contextmanager
    def _calling(self, what: str) -> Iterator[None]:
        """An API server that cannot be reached or does not answer in time, during the
        calls inside, is a BackendUnavailable naming ``what`` was being done."""
        try:
            yield
        except Exception as exc:
            error = unreachable(exc, what, self._api)
            if error is None:
                raise
            raise error from None

    def _custom(self) -> Any:
        from kubernetes import client

        return client.CustomObjectsApi(self.api)

    # -- the interface ---------------------------------------------------------------------------
    def submit(self, job: TrainJob, bundle: CodeBundle, owner: Owner | None = None) -> str:
        from kubernetes.client.exceptions import ApiException

        owner = owner or Owner(getpass.getuser())
        settings = self.settings.for_queue(job.spec.queue)  # the queue's team's namespace
        job, image = settings.pin_image(job)
        custom = self._custom()
        run = self.store.create(
            job,
            bundle.store_files(),
            owner.user,
            team=owner.team,
            backend=self.name,
            code_hash=bundle.content_hash,
            origin={**bundle.origin, "namespace": settings.namespace},
            image=image,
            owner_ids=self.settings.pod_ids(),
        )
        ref = m.JobRef(run.id, "", run.path.parent.name, owner.team)
        body = m.trainjob(job, ref, owner.user, settings)
        try:
            with self._calling(f"submitting {job.metadata.name!r}"):
                custom.create_namespaced_custom_object(
                    GROUP, VERSION, settings.namespace, PLURAL, body
                )
        except ApiException as exc:
            self.store.remove(run.id)
            raise BackendError(
                f"the cluster refused {job.metadata.name!r}: {_reason(exc)}"
            ) from None
        except BaseException:
            self.store.remove(run.id)
            raise
        return run.id

    def status(self, job_id: str) -> JobStatus:
        return self.run_dir(job_id).status()

    def request_cancel(self, job_id: str, by: str | None = None) -> bool:
        """The TrainJob's ``aviflow.dev/cancel`` annotation, for the controller to act on;
        False if the job had already finished."""
        from kubernetes.client.exceptions import ApiException

        run = self.run_dir(job_id)
        if run.status().state.is_finished():
            return False
        who = by or getpass.getuser()
        patch = {"metadata": {"annotations": {m.ANNOTATION_CANCEL: f"cancelled by {who}"}}}
        recorded = run.meta().origin.get("namespace")  # where submit (or adoption) found it
        ns = recorded if isinstance(recorded, str) and recorded else self.settings.namespace
        try:
            with self._calling(f"cancel of {job_id}"):
                self._custom().patch_namespaced_custom_object(
                    GROUP, VERSION, ns, PLURAL, job_id, patch
                )
        except ApiException as exc:
            if exc.status != 404:
                raise BackendError(f"cancel of {job_id}: {_reason(exc)}") from None
            # the TrainJob is gone: the controller records the end when it sees the deletion
        return True

    def cancel(self, job_id: str, by: str | None = None) -> bool:
        """:meth:`request_cancel`, then wait (two minutes at most) until the controller has
        stopped the job."""
        if not self.request_cancel(job_id, by):
            return False
        run = self.run_dir(job_id)
        deadline = time.monotonic() + CANCEL_WAIT
        while time.monotonic() < deadline:
            if run.status().state.is_finished():
                return True
            time.sleep(0.2)
        raise BackendError(
            f"cancel of {job_id}: the controller has not stopped the job in {CANCEL_WAIT:.0f}s; "
            "is `python -m aviflow.operator` running?"
        )

    def images(self) -> list[TrainerImage]:
        return self.settings.trainer_images()

    def queues(self) -> list[QueueQuota]:
        """Every LocalQueue of the jobs' namespaces (with ``queueNamespaces``, the teams'
        queues only) with its ClusterQueue's GPU quota and use, and the Aviflow jobs waiting
        in it in Kueue's order (its visibility API)."""
        with self._calling("reading Kueue's queues"):
            return self._queues()

    def _queues(self) -> list[QueueQuota]:
        from kubernetes.client.exceptions import ApiException

        custom, teams = self._custom(), self.settings.queue_namespaces
        local_queues = []
        for ns in self.settings.job_namespaces():
            try:
                found = custom.list_namespaced_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, ns, "localqueues"
                )["items"]
            except ApiException as exc:
                raise BackendError(
                    f"cannot read Kueue's LocalQueues in {ns}: {_reason(exc)}"
                ) from None
            local_queues += [
                q for q in found if not teams or teams.get(q["metadata"]["name"]) == ns
            ]
        out = []
        for lq in sorted(local_queues, key=lambda q: q["metadata"]["name"]):
            ns = lq["metadata"]["namespace"]
            try:
                cq = custom.get_cluster_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", lq["spec"]["clusterQueue"]
                )
            except ApiException:
                cq = {}
            pending = pending_workloads(self.api, ns, lq["metadata"]["name"]) or []
            out.append(queue_quota(lq, cq, pending, self._pending_job, self.settings.gpu_resource))
        return out

    def quota(self, queue: str) -> QueueQuota | None:
        return next((q for q in self.queues() if q.queue == queue), None)

    def _pending_job(self, workload: dict[str, Any]) -> tuple[str, str, int] | None:
        job_name = owner_job(workload)
        if job_name is None or "-a" not in job_name:
            return None
        job_id = job_name.rsplit("-a", 1)[0]
        try:
            run = self.run_dir(job_id)
            return job_id, run.meta().user, run.spec().spec.total_gpus
        except AviflowError:
            return None

    def render(self, job: TrainJob) -> list[dict[str, Any]]:
        """The TrainJob, its Service (and NetworkPolicy) and attempt 1's Job, with
        placeholders for what only submission decides (the id, the TrainJob's uid)."""
        user, settings = getpass.getuser(), self.settings.for_queue(job.spec.queue)
        ref = m.JobRef(f"{job.slug}-<id>", "<uid>", slugify(user), None)
        policy = [m.network_policy(ref, settings)] if settings.network_policy else []
        return [
            m.trainjob(job, ref, user, settings),
            m.service(ref, settings),
            *policy,
            m.attempt_job(job, ref, 1, settings, deadline_seconds=job.spec.time_limit_seconds),
        ]


def _reason(exc: Any) -> str:
    """The API server's message from an ``ApiException``."""
    import json

    try:
        body = json.loads(exc.body)
        return str(body.get("message") or exc.reason)
    except (TypeError, ValueError):
        return f"{exc.status} {exc.reason}"
