"""Pure builders: a TrainJob and its settings -> the Kubernetes objects it needs. No I/O.

Per job (all in ``settings.namespace``, named after the job id):

- the ``TrainJob`` custom resource itself (:func:`trainjob`), which owns everything below,
  so deleting it deletes every object of the job;
- for a job of more than one node, a headless ``Service`` ``avf-<id>`` (:func:`service`):
  each pod's hostname is ``<id>-a<N>-<index>`` under that subdomain, so rank 0 is
  ``<id>-a<N>-0.avf-<id>``; a single node's rank 0 is in its own pod (``127.0.0.1``), so
  it has no Service (:func:`has_service`): one object fewer to write before it can start;
- per attempt, an Indexed ``Job`` ``<id>-a<N>`` (:func:`attempt_job`): one pod per HGX
  node, suspended until Kueue admits it from the team's LocalQueue. Each attempt is one
  Kueue Workload, so each admission is accounted on its own.

The pods see only their own job's data part of the shared run store read-write
(``<user>/<job>/data``, ``subPath``), its code snapshot read-only, and read-only the checkpoint
``spec.resumeFrom`` names; the control part (spec, meta, events, status) is never mounted. Their environment is a
:class:`~aviflow.runtime.env.RuntimeEnv`; ``JOB_COMPLETION_INDEX`` gives the node's index. What
the admin's training runtime adds (devices, network, capabilities, volumes) comes from the
settings alone (:mod:`aviflow.k8s.runtimes`): the spec only names it.

The rendezvous port is derived from the job id and attempt (``20000-29999``): the pods of an
attempt share it, and jobs whose pods share a network namespace (``hostNetwork``, common on
HGX nodes for RDMA) do not collide.
"""

from __future__ import annotations

import ipaddress
import zlib
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Any, Final

from aviflow._ports import RENDEZVOUS
from aviflow.k8s import runtimes
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.settings import METADATA_CIDR, ClusterSettings
from aviflow.names import label_value
from aviflow.runtime.env import RuntimeEnv
from aviflow.spec import API_VERSION, KIND, TrainJob
from aviflow.store import CODE_DIR, DATA_DIR, rank_log_share

PREFIX: Final = "aviflow.dev"
LABEL_JOB: Final = f"{PREFIX}/job"
LABEL_ATTEMPT: Final = f"{PREFIX}/attempt"
LABEL_USER: Final = f"{PREFIX}/user"
LABEL_TEAM: Final = f"{PREFIX}/team"
ANNOTATION_NAME: Final = f"{PREFIX}/name"
ANNOTATION_USER: Final = f"{PREFIX}/user"
ANNOTATION_CANCEL: Final = f"{PREFIX}/cancel"
# the token of the submission that created the TrainJob (in its run directory's control part)
ANNOTATION_SUBMISSION: Final = f"{PREFIX}/submission"
MANAGED_BY: Final = {"app.kubernetes.io/managed-by": "aviflow"}
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
TAS_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
TAS_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
CONTAINER: Final = "trainer"
DNS_LABELS: Final = {"k8s-app": "kube-dns"}  # the cluster DNS's pods (CoreDNS, kube-dns)
RESUME_MOUNT: Final = "/aviflow/resume"
PORT_BASE, PORT_SPAN = RENDEZVOUS.start, len(RENDEZVOUS)  # no free port of aviflow's is in it
# podFailurePolicy rule indexes: the Job's Failed condition names the rule that matched
RULE_DISRUPTION, RULE_EXIT = 0, 1


@dataclass(frozen=True)
class JobRef:
    """A submitted job as its children refer to it: id (the TrainJob's name), the TrainJob's
    uid (owner references), its owner's run-store directory name and team."""

    id: str
    uid: str
    user_dir: str
    team: str | None = None


def service_name(job_id: str) -> str:
    return f"avf-{job_id}"


def attempt_name(job_id: str, attempt: int) -> str:
    return f"{job_id}-a{attempt}"


def main_port(job_id: str, attempt: int) -> int:
    """Rank 0's rendezvous port: per attempt, so an attempt never waits for the previous
    one's port to be freed where pods share a network namespace."""
    return PORT_BASE + zlib.crc32(f"{job_id}/{attempt}".encode()) % PORT_SPAN


def main_addr(job_id: str, attempt: int) -> str:
    """Rank 0's address: the first pod's hostname under the job's headless Service."""
    return f"{attempt_name(job_id, attempt)}-0.{service_name(job_id)}"


def has_service(job: TrainJob) -> bool:
    """Whether the job has a headless Service: only its nodes' pods need to find each other.

    >>> one = TrainJob.from_dict({"metadata": {"name": "a"}, "spec": {"command": ["x"]}})
    >>> has_service(one), has_service(one.with_changes(nodes=2))
    (False, True)
    """
    return job.spec.nodes > 1


def run_dir(settings: ClusterSettings, ref: JobRef) -> PurePosixPath:
    """The job's directory as its pods mount it."""
    return PurePosixPath(settings.runs.mount_path) / ref.user_dir / ref.id


def labels(ref: JobRef, user: str | None = None) -> dict[str, str]:
    out = {LABEL_JOB: ref.id, LABEL_USER: label_value(user or ref.user_dir)}
    if ref.team:
        out[LABEL_TEAM] = label_value(ref.team)
    return out


def owner_reference(ref: JobRef) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": ref.id,
        "uid": ref.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def trainjob(
    job: TrainJob,
    ref: JobRef,
    user: str,
    settings: ClusterSettings,
    submission: str | None = None,
) -> dict[str, Any]:
    """The TrainJob custom resource for ``job`` as ``user`` submits it (``ref.uid`` unused);
    ``submission``: the token of its run directory, which the controller binds it by."""
    body = job.to_dict()
    annotations = {ANNOTATION_NAME: job.metadata.name, ANNOTATION_USER: user}
    if submission is not None:
        annotations[ANNOTATION_SUBMISSION] = submission
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": ref.id,
            "namespace": settings.namespace,
            "labels": {**MANAGED_BY, **job.metadata.labels, **labels(ref, user)},
            "annotations": annotations,
        },
        "spec": body["spec"],
    }


def _job_object_meta(ref: JobRef, settings: ClusterSettings) -> dict[str, Any]:
    """The metadata of the objects that live as long as the job (its Service and its
    NetworkPolicy, both named ``avf-<id>``): owned by its TrainJob."""
    return {
        "name": service_name(ref.id),
        "namespace": settings.namespace,
        "labels": {**MANAGED_BY, **labels(ref)},
        "ownerReferences": [owner_reference(ref)],
    }


def service(ref: JobRef, settings: ClusterSettings) -> dict[str, Any]:
    """The headless Service that gives the job's pods their DNS names."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _job_object_meta(ref, settings),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {LABEL_JOB: ref.id},
        },
    }


def network_policy(ref: JobRef, settings: ClusterSettings) -> dict[str, Any]:
    """The job's NetworkPolicy, next to its Service: its pods take traffic from each other
    only (rendezvous and collectives) and reach each other, the cluster's DNS and the
    admin's ``egress`` allow-list, never the cloud's metadata address. The run store is
    mounted by the node, not reached by the pods. The chart denies trainer pods everything
    else (policies add up: one job's policy opens nothing to another's pods)."""
    own = {"podSelector": {"matchLabels": {LABEL_JOB: ref.id}}}
    egress: list[dict[str, Any]] = [
        {"to": [own]},
        {
            "to": [{"namespaceSelector": {}, "podSelector": {"matchLabels": DNS_LABELS}}],
            "ports": [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")],
        },
    ]
    metadata = ipaddress.ip_network(METADATA_CIDR)
    for rule in settings.egress:
        net = ipaddress.ip_network(rule.cidr)
        block: dict[str, Any] = {"cidr": rule.cidr}
        if net.version == metadata.version and metadata.subnet_of(net):  # type: ignore[arg-type]
            block["except"] = [METADATA_CIDR]
        entry: dict[str, Any] = {"to": [{"ipBlock": block}]}
        if rule.ports:
            entry["ports"] = [{"protocol": "TCP", "port": p} for p in rule.ports]
        egress.append(entry)
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _job_object_meta(ref, settings),
        "spec": {
            "podSelector": {"matchLabels": {LABEL_JOB: ref.id}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [{"from": [own]}],
            "egress": egress,
        },
    }


def attempt_job(
    job: TrainJob,
    ref: JobRef,
    attempt: int,
    settings: ClusterSettings,
    *,
    deadline_seconds: int | None = None,
    resume_subpath: str | None = None,
) -> dict[str, Any]:
    """Attempt ``attempt``'s Indexed Job. ``deadline_seconds``: running time it has left
    (``spec.timeLimit`` minus what earlier attempts used); ``resume_subpath``: the
    ``spec.resumeFrom`` checkpoint's directory relative to the run store's root. The job's
    training runtime (``spec.runtime``, else the default) adds to its pods
    (:func:`aviflow.k8s.runtimes.apply`); one the settings do not have is a SpecError."""
    spec = job.spec
    name = attempt_name(ref.id, attempt)
    node = RuntimeEnv(
        run_dir=run_dir(settings, ref),  # type: ignore[arg-type]
        num_nodes=spec.nodes,
        main_port=main_port(ref.id, attempt),
        attempt=attempt,
        keep_last=spec.checkpoints.keep_last,
        log_to_store=False,  # the node's output is the pod's log
        resume_dir=RESUME_MOUNT if resume_subpath else None,  # type: ignore[arg-type]
        hang_timeout=spec.hang_timeout_seconds,
        rank_log_bytes=rank_log_share(settings.rank_log_cap_bytes, spec.total_gpus),
    )
    if has_service(job):  # one node: rank 0 is in its own pod (RuntimeEnv's default)
        node = replace(node, main_addr=main_addr(ref.id, attempt))
    pod_labels = {**labels(ref), LABEL_ATTEMPT: str(attempt)}
    job_labels = {**MANAGED_BY, **pod_labels, QUEUE_LABEL: spec.queue}
    if settings.priority_class:
        job_labels[PRIORITY_LABEL] = settings.priority_class
    # the job's data part read-write and its code read-only; the control part (spec, meta,
    # events, status) is never mounted: nothing the job writes can steer the controller
    job_dir = f"{ref.user_dir}/{ref.id}"
    mounts: list[dict[str, Any]] = [
        {
            "name": "runs",
            "mountPath": f"{node.run_dir}/{DATA_DIR}",
            "subPath": f"{job_dir}/{DATA_DIR}",
        },
        {
            "name": "runs",
            "mountPath": f"{node.run_dir}/{CODE_DIR}",
            "subPath": f"{job_dir}/{CODE_DIR}",
            "readOnly": True,
        },
        {"name": "shm", "mountPath": "/dev/shm"},
        # the root file system is read-only: temporary files and $HOME's caches go here
        *({"name": f"scratch-{i}", "mountPath": path} for i, path in enumerate(settings.scratch)),
    ]
    if resume_subpath:
        mounts.append(
            {"name": "runs", "mountPath": RESUME_MOUNT, "subPath": resume_subpath, "readOnly": True}
        )
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": spec.nodes,
        "parallelism": spec.nodes,
        "backoffLimit": 0,
        "podReplacementPolicy": "Failed",
        "podFailurePolicy": {
            "rules": [
                # order matters (RULE_*): a disruption (preemption, drain, node loss) first
                {
                    "action": "FailJob",
                    "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
                },
                {
                    "action": "FailJob",
                    "onExitCodes": {"containerName": CONTAINER, "operator": "NotIn", "values": [0]},
                },
            ]
        },
        "suspend": True,
        "template": {
            "metadata": {"labels": pod_labels, "annotations": _topology(settings)},
            "spec": {
                **({"subdomain": service_name(ref.id)} if has_service(job) else {}),
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "enableServiceLinks": False,
                # Pod Security's `restricted` profile: a non-root uid, the runtime's
                # default seccomp filter, no privilege escalation and no capabilities
                "securityContext": {
                    "runAsUser": settings.run_as_user,
                    "runAsGroup": settings.run_as_group,
                    "runAsNonRoot": True,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "terminationGracePeriodSeconds": settings.termination_grace_seconds,
                "nodeSelector": dict(settings.node_selector),
                "tolerations": [dict(t) for t in settings.tolerations],
                "containers": [
                    {
                        "name": CONTAINER,
                        "image": settings.reference(spec.image),
                        "command": [settings.python, "-m", "aviflow.runtime"],
                        "workingDir": str(node.run_dir),
                        "env": [
                            {"name": k, "value": v}
                            for k, v in sorted(node.to_env(node_rank=False).items())
                        ],
                        # the team's Secrets by name: the kubelet reads them, never Aviflow
                        **(
                            {"envFrom": [{"secretRef": {"name": n}} for n in spec.secrets]}
                            if spec.secrets
                            else {}
                        ),
                        "ports": [{"name": "rendezvous", "containerPort": node.main_port}],
                        "resources": _resources(job, settings),
                        "volumeMounts": mounts,
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"]},
                            "readOnlyRootFilesystem": True,
                        },
                    }
                ],
                "volumes": [
                    {
                        "name": "runs",
                        "persistentVolumeClaim": {"claimName": settings.runs.claim_name},
                    },
                    {
                        "name": "shm",
                        "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size},
                    },
                    *(
                        {"name": f"scratch-{i}", "emptyDir": {}}
                        for i in range(len(settings.scratch))
                    ),
                ],
            },
        },
    }
    picked = settings.runtime(spec.runtime)  # the admin's additions (runtimes.py)
    if picked is not None:
        runtimes.apply(job_spec["template"], picked[1], picked[0])
    if deadline_seconds is not None:
        job_spec["activeDeadlineSeconds"] = max(1, int(deadline_seconds))
    if settings.finished_ttl_seconds is not None:
        # finished attempts do not pile up (nor their pods, nor the controller's relists)
        job_spec["ttlSecondsAfterFinished"] = settings.finished_ttl_seconds
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": settings.namespace,
            "labels": job_labels,
            "annotations": {ANNOTATION_NAME: job.metadata.name},
            "ownerReferences": [owner_reference(ref)],
        },
        "spec": job_spec,
    }


def _resources(job: TrainJob, settings: ClusterSettings) -> dict[str, Any]:
    spec = job.spec
    amounts: dict[str, Any] = {settings.gpu_resource: str(spec.gpus_per_node)}
    cpu = spec.cpu_per_node
    if cpu is None and settings.cpu_per_gpu is not None:
        cpu = _times(settings.cpu_per_gpu, spec.gpus_per_node)
    if cpu is not None:
        amounts["cpu"] = str(cpu)
    memory = spec.memory_per_node
    if memory is None and settings.memory_per_gpu is not None:
        memory = _times(settings.memory_per_gpu, spec.gpus_per_node)
    if memory is not None:
        amounts["memory"] = str(memory)
    return {"requests": dict(amounts), "limits": dict(amounts)}


def _times(quantity: int | str, n: int) -> str:
    """``quantity`` x ``n`` as a quantity (``'12'`` x 2 = ``'24'``, ``'64Gi'`` x 2 = ``'128Gi'``)."""
    text = str(quantity)
    digits = len(text) - len(text.lstrip("0123456789"))
    if digits == 0:
        raise ValueError(f"{quantity!r} is not a whole-number quantity")
    return f"{int(text[:digits]) * n}{text[digits:]}"


def _topology(settings: ClusterSettings) -> dict[str, str]:
    """Kueue TAS: every pod in one block (required), or preferably in one domain."""
    if settings.topology.required:
        return {TAS_REQUIRED: settings.topology.required}
    if settings.topology.preferred:
        return {TAS_PREFERRED: settings.topology.preferred}
    return {}


def trainjob_path(namespace: str) -> str:
    """The TrainJobs' collection URL in ``namespace``."""
    return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
