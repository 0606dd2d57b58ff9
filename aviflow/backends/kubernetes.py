"""``KubernetesBackend``: jobs are TrainJob resources on a cluster with Kueue.

``submit`` writes the job's directory in the shared run store (spec, code bundle, meta with
its owner, and a random submission token, all in its control part; the job marked pending),
then creates the TrainJob named by the job's id and carrying the token (annotation
``aviflow.dev/submission``); the controller (``python -m aviflow.operator``) binds the
directory only to a TrainJob with that token, does the rest and is the only writer of the
job's events. Submission is idempotent:

- a TrainJob the API server refuses leaves nothing behind (the directory is removed), and so
  does a create that never reached it (the connection was refused);
- a create whose answer is lost (a timeout, a broken connection, a 5xx) is sent again: a
  ``409`` for a TrainJob carrying this token means the first went through (success); when
  no answer comes at all, the directory stays (its TrainJob may exist) and the error says
  so: the controller takes the job up if the TrainJob appears, and marks it FAILED ("the
  submission did not complete") after its grace period if not;
- ``job_id`` (chosen by the caller: aviflow-api's ``Idempotency-Key``) makes a retry complete
  the same job instead of making a second one.

Reads come from the
run store as with the local backend (metrics, per-rank logs and checkpoints are written
there by the pods); ``request_cancel`` asks the controller through the TrainJob's
``aviflow.dev/cancel`` annotation, and ``cancel`` then waits until the job has ended.
``render`` is the exact objects (``--dry-run``).

Every call to the API server has a timeout (``apiTimeout``, default 5 s to connect and 30 s
for the answer; :func:`~aviflow.k8s.client.api_client`): an API server that does not answer
in time is a :class:`~aviflow.errors.BackendUnavailable` saying so (503 in aviflow-api).

Settings (one section: ``api.kubernetes`` in the hub config, or a YAML file named by
``AVIFLOW_K8S_CONFIG``): :class:`KubernetesSection`, the
:class:`~aviflow.k8s.settings.ClusterSettings` the controller reads too, plus ``kubeconfig``
and ``context`` (default: ``KUBECONFIG``, then in-cluster) and ``apiTimeout``
(:class:`~aviflow.k8s.settings.ApiTimeout`).
"""

from __future__ import annotations

import getpass
import os
import secrets
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from aviflow.backends._store import StoreReads
from aviflow.backends.base import Backend
from aviflow.bundle import CodeBundle
from aviflow.errors import AviflowError, BackendError, BackendUnavailable
from aviflow.estimate import DRY_RUN_ID, UNKNOWN, Estimate, estimate
from aviflow.estimate import Waiting as EstWaiting
from aviflow.k8s import manifests as m
from aviflow.k8s.client import api_client, may_have_arrived, unreachable
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.forecast import KUEUE_REQUEUE, POOL_FILE, POOL_FRESH, read_snapshot
from aviflow.k8s.kueue import (
    KUEUE_GROUP,
    KUEUE_VERSION,
    cohort_gpus_lendable,
    owner_job,
    pending_workloads,
    queue_quota,
)
from aviflow.k8s.settings import ApiTimeout, ClusterSettings
from aviflow.names import slugify
from aviflow.records import JobStatus, Owner, QueueQuota, TrainerImage
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore, read_json

CONFIG_ENV = "AVIFLOW_K8S_CONFIG"
RUNS_MOUNT_ENV = "AVIFLOW_RUNS_MOUNT"
CANCEL_WAIT = 120.0
CREATE_TRIES = 2  # a create whose answer was lost is sent once more: its 409 tells
RETRY_PAUSE = 0.5
RETRIED = (429, 500, 502, 503, 504)  # answers that do not say the TrainJob was not made


class KubernetesSection(ClusterSettings):
    """``api.kubernetes``: the cluster settings, checked when the config loads (a typo fails
    the hub's start), and how aviflow-api reaches the cluster."""

    kubeconfig: str | None = Field(None, description="Default: KUBECONFIG, then in-cluster.")
    context: str | None = None
    api_timeout: ApiTimeout = Field(
        default_factory=ApiTimeout,
        alias="apiTimeout",
        description="How long aviflow-api's calls to the Kubernetes API server may take; one "
        "that does not answer in time is a 503 saying so.",
    )


class KubernetesBackend(StoreReads, Backend):
    """TrainJobs on Kubernetes + Kueue; see the module docstring."""

    name = "kubernetes"
    settings_model = KubernetesSection
    reports_borrowing = True

    @classmethod
    def config_section(
        cls, settings: BaseModel | None, *, run_root: Path, quotas: Mapping[str, int]
    ) -> dict[str, Any]:
        """The keys the admin set, the run store's path here (``runs.localPath``) defaulting
        to the service's run root; the quotas are Kueue's, on the cluster."""
        section = super().config_section(settings, run_root=run_root, quotas=quotas)
        runs = dict(section.get("runs") or {})
        runs.setdefault("localPath", str(run_root))
        return {**section, "runs": runs}

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

    def start(self) -> None:
        """The start-up of a service that writes the run store (aviflow-api): move in the
        jobs of an earlier layout of the store (as the controller does when it starts)."""
        self.store.migrate_legacy()

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
    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        """Write the job's directory (its owner and a submission token in its control part,
        marked pending), then create its TrainJob carrying the token; see the module
        docstring for what a lost answer, a refusal and a retry do."""
        owner = owner or Owner(getpass.getuser())
        settings = self.settings.for_queue(job.spec.queue)  # the queue's team's namespace
        run = self.submitted_before(job_id, owner) if job_id is not None else None
        written: TrainJob | None = None  # the spec just written, not read back
        if run is None:
            pinned, image = settings.pin_image(settings.pin_runtime(job))
            try:
                run = self.store.create(
                    pinned,
                    bundle.store_files(),
                    owner.user,
                    team=owner.team,
                    backend=self.name,
                    code_hash=bundle.content_hash,
                    origin={**bundle.origin, "namespace": settings.namespace},
                    job_id=job_id,
                    image=image,
                    owner_ids=self.settings.pod_ids(),
                    submission=secrets.token_urlsafe(24),
                )
            except FileExistsError:  # the same id, being written by a request like this one
                raise BackendUnavailable(
                    f"job {job_id} is being submitted by another request (an earlier try of "
                    "this one?); try again in a few seconds"
                ) from None
            written = pinned
        elif run.events().items or run.status().state.is_finished():
            return run.id  # the controller has taken it up (or recorded that it never came)
        self._create_trainjob(run, written)
        return run.id

    def _create_trainjob(self, run: RunDir, spec: TrainJob | None = None) -> None:
        """Create the TrainJob of ``run`` (its spec and owner as its directory records them;
        ``spec``: the one just written there, not parsed back on a submission's way). A
        create whose answer is lost is sent again: a 409 for a TrainJob with this
        submission's token is this submission's (done); one without it holds the name, so
        this one can never be created (the directory goes). A refusal removes the directory;
        a request that may have reached the API server, unanswered, leaves it (pending: the
        controller takes it up, or fails it after its grace period)."""
        from kubernetes.client.exceptions import ApiException

        job = spec if spec is not None else run.spec()
        meta, token = run.meta(), run.submission_token()
        namespace = str(meta.origin.get("namespace") or self.settings.namespace)
        settings = self.settings.in_namespace(namespace)
        ref = m.JobRef(run.id, "", run.path.parent.name, meta.team)
        body = m.trainjob(job, ref, meta.user, settings, submission=token)
        what = f"submitting {job.metadata.name!r}"
        custom, sent, error = self._custom(), False, None
        for attempt in range(CREATE_TRIES):
            if attempt:
                time.sleep(RETRY_PAUSE)
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)
                return
            except ApiException as exc:
                if exc.status == 409:
                    self._check_ours(run, namespace, token, what)
                    return
                if exc.status not in RETRIED:  # the API server refused it: nothing was made
                    self.store.remove(run.id)
                    raise BackendError(
                        f"the cluster refused {job.metadata.name!r}: {_reason(exc)}"
                    ) from None
                sent = True
                error = BackendUnavailable(f"{what}: the API server answered {_reason(exc)}")
            except Exception as exc:
                error = unreachable(exc, what, self._api)
                if error is None:
                    raise  # not the network's: the directory stays (pending) to be settled
                sent = sent or may_have_arrived(exc)
        assert error is not None
        if not sent:  # no request reached the API server
            self.store.remove(run.id)
            raise error
        raise BackendUnavailable(
            f"{error} Job {run.id} is recorded, and its TrainJob may have been created: the "
            "controller takes it up if it was, and marks it failed ('the submission did not "
            "complete') after its grace period if it was not. Submitting again with the same "
            "Idempotency-Key (aviflow-api) settles it at once."
        ) from None

    def _check_ours(self, run: RunDir, namespace: str, token: str | None, what: str) -> None:
        """A TrainJob named like ``run`` exists: done if it carries ``run``'s token."""
        from kubernetes.client.exceptions import ApiException

        try:
            with self._calling(what):
                found = self._custom().get_namespaced_custom_object(
                    GROUP, VERSION, namespace, PLURAL, run.id
                )
        except ApiException as exc:
            raise BackendUnavailable(
                f"{what}: the TrainJob {run.id} exists, but reading it failed: {_reason(exc)}; "
                "try again"
            ) from None
        annotations = (found.get("metadata") or {}).get("annotations") or {}
        if token is not None and annotations.get(m.ANNOTATION_SUBMISSION) == token:
            return  # ours: an earlier create went through, its answer lost
        self.store.remove(run.id)  # the name is another TrainJob's: ours can never be made
        raise BackendError(
            f"{what}: the cluster has another TrainJob named {run.id} in {namespace}; submit "
            "again (without this job id)"
        )

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
        queues only) with its ClusterQueue's GPU quota and use, what its cohort lends it now,
        and the Aviflow jobs waiting in it in Kueue's order (its visibility API)."""
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
        gpu = self.settings.gpu_resource
        try:  # every ClusterQueue at once: a cohort's members lend to each other
            found = custom.list_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues")
            cluster_queues = {cq["metadata"]["name"]: cq for cq in found["items"]}
            lendable = cohort_gpus_lendable(list(cluster_queues.values()), gpu)
        except ApiException:  # no list rule: each queue's own, and its cohort is not known
            cluster_queues, lendable = {}, {}
            for name in {lq["spec"]["clusterQueue"] for lq in local_queues}:
                try:
                    cluster_queues[name] = custom.get_cluster_custom_object(
                        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name
                    )
                except ApiException:
                    pass
        out = []
        for lq in sorted(local_queues, key=lambda q: q["metadata"]["name"]):
            ns, name = lq["metadata"]["namespace"], lq["spec"]["clusterQueue"]
            # Kueue's order (its visibility API); where it is not served, none here: aviflow-api
            # orders the waiting jobs by the positions the controller gave them
            pending = pending_workloads(self.api, ns, lq["metadata"]["name"]) or []
            cq = cluster_queues.get(name, {})
            out.append(queue_quota(lq, cq, pending, self._pending_job, gpu, lendable.get(name, 0)))
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

    def forecast(self, job: TrainJob) -> Estimate | None:
        """From the controller's latest snapshot of the pool (``.pool.json`` in the run store,
        at most :data:`POOL_FRESH` seconds old): ``job`` after the jobs waiting in its
        ClusterQueue. None where there is no fresh snapshot, or its queue is not in it."""
        found = read_snapshot(read_json(self.store.root / POOL_FILE, None, beneath=self.store.root))
        now = time.time()
        if found is None or not 0 <= now - found[0] <= POOL_FRESH:
            return None
        _, limits, holding, waiting, queues, reclaim = found
        cq = queues.get(job.spec.queue)
        if cq is None:
            return None
        limit = job.spec.time_limit_seconds
        me = EstWaiting(DRY_RUN_ID, cq, job.spec.total_gpus,
                        (0.0, float(limit) if limit is not None else UNKNOWN))  # fmt: skip
        est = estimate(
            now, limits, holding, [*waiting, me], reclaim=reclaim, requeue=KUEUE_REQUEUE
        )  # as the controller's forecast
        return est[DRY_RUN_ID]

    def render(self, job: TrainJob) -> list[dict[str, Any]]:
        """The TrainJob, its Service (several nodes) and NetworkPolicy (when the settings
        make them) and attempt 1's Job, with placeholders for what only submission decides
        (the id, the TrainJob's uid, the submission token)."""
        user, settings = getpass.getuser(), self.settings.for_queue(job.spec.queue)
        ref = m.JobRef(f"{job.slug}-<id>", "<uid>", slugify(user), None)
        service = [m.service(ref, settings)] if m.has_service(job) else []
        policy = [m.network_policy(ref, settings)] if settings.network_policy else []
        return [
            m.trainjob(job, ref, user, settings, submission="<token>"),
            *service,
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
