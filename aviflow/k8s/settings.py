"""``ClusterSettings``: where and how TrainJobs run on a cluster, from one config section.

The Kubernetes backend (``api.kubernetes`` in the hub config, ``AVIFLOW_K8S_CONFIG`` or
``--config`` for the CLI) and the controller read the same section; the builders in
:mod:`aviflow.k8s.manifests` take it as it is. Keys are camelCase like the spec's.

>>> s = ClusterSettings.from_dict({"namespace": "ml", "image": "trainer:1"})
>>> s.namespace, s.runs.mount_path, s.gpu_resource
('ml', '/aviflow/runs', 'nvidia.com/gpu')
"""

from __future__ import annotations

import ipaddress
import os
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from aviflow._model import StrictModel, explain, storable_problems
from aviflow.errors import BackendError, SpecError
from aviflow.images import pick
from aviflow.k8s.runtimes import PodSecurityLevel, TrainingRuntime, problems
from aviflow.names import DNS1123_LABEL, claim_name, is_dns1123_label, mount_path
from aviflow.records import TrainerImage
from aviflow.spec import IMAGE_REFERENCE, TrainJob
from aviflow.store import (
    DEFAULT_JOB_LOG_CAP,
    RankLogCap,
    job_log_cap,
)
from aviflow.usage import UsageSettings

_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
DEFAULT_TOLERATIONS: tuple[dict[str, str], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)


class RunStoreVolume(StrictModel):
    """The shared run store (a ReadWriteMany volume): its claim in the jobs' namespace, where
    pods mount it, and where this process (the backend, the controller) sees it."""

    claim_name: str = Field("aviflow-runs", alias="claimName")
    mount_path: str = Field("/aviflow/runs", alias="mountPath")
    local_path: str | None = Field(
        None,
        alias="localPath",
        description="Where the run store is mounted here (default: AVIFLOW_RUNS_MOUNT, else "
        "the local run store).",
    )

    @field_validator("claim_name")
    @classmethod
    def _claim(cls, v: str) -> str:
        return claim_name(v)

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, v: str) -> str:
        return mount_path(v)


class Topology(StrictModel):
    """Kueue Topology-Aware Scheduling: the node label whose domain (a block) must hold all
    of a job's pods, or, instead, the one they should share when they can (``preferred``).
    Kueue refuses both on one pod set; within a required block its best-fit placement
    already packs the pods into as few racks as it can (one when they fit). Both None:
    no topology constraint."""

    required: str | None = "topology.aviflow.dev/block"
    preferred: str | None = None

    @field_validator("preferred", "required")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not _LABEL_KEY.fullmatch(v):
            raise ValueError(f"{v!r} is not a node label key")
        return v

    @model_validator(mode="after")
    def _one(self) -> Topology:
        if self.required and self.preferred:
            raise ValueError(
                "give topology.required or topology.preferred, not both (Kueue allows one "
                "per pod set)"
            )
        return self


class ImageEntry(StrictModel):
    """One trainer image users may pick with ``--image NAME`` (``make images`` writes the
    entry of the image it built to ``images/.build/trainer-images.yaml``)."""

    name: str = Field(description="What users pick it by (a DNS-1123 label).")
    image: str = Field(description="The reference pods pull.")
    lock_hash: str = Field("", alias="lockHash", description="The lock it was built from.")
    packages: dict[str, str] = Field(
        default_factory=dict,
        description="Versions the notebook should match (torch, accelerate, aviflow).",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a name for an image ({DNS1123_LABEL.pattern})")
        return v

    @field_validator("image")
    @classmethod
    def _image(cls, v: str) -> str:
        if not IMAGE_REFERENCE.fullmatch(v):
            raise ValueError(f"{v!r} is not an image reference")
        return v

    def record(self) -> TrainerImage:
        return TrainerImage(self.name, self.image, self.lock_hash, dict(self.packages))


# The cloud's instance metadata address: never reachable from a trainer, whatever the
# allow-list says (its credentials are the node's)
METADATA_CIDR = "169.254.169.254/32"
# a per-GPU amount that multiplies exactly: whole units, or a whole number of a suffix
PER_GPU_QUANTITY = re.compile(r"[1-9][0-9]{0,8}(m|k|M|G|T|Ki|Mi|Gi|Ti)?")


class EgressRule(StrictModel):
    """An address range trainer pods may reach (the admin's allow-list), on some ports."""

    cidr: str = Field(description="An IPv4 or IPv6 range, e.g. 10.20.0.0/16 or 0.0.0.0/0.")
    ports: list[int] = Field(default_factory=list, description="TCP ports (default: every port).")

    @field_validator("cidr")
    @classmethod
    def _cidr(cls, v: str) -> str:
        try:
            return str(ipaddress.ip_network(v, strict=True))
        except ValueError as exc:
            raise ValueError(f"{v!r} is not an address range: {exc}") from None

    @field_validator("ports")
    @classmethod
    def _ports(cls, v: list[int]) -> list[int]:
        bad = [p for p in v if not 1 <= p <= 65535]
        if bad:
            raise ValueError(f"ports {bad} are not TCP ports (1 to 65535)")
        return v


class ApiTimeout(StrictModel):
    """How long one call to the Kubernetes API server may take: an API server that stops
    answering fails the call, it never holds the caller."""

    connect: float = Field(5.0, gt=0, le=120, description="Seconds to connect (tried twice).")
    read: float = Field(
        30.0, gt=0, le=600, description="Seconds to wait for the answer once the call is sent."
    )

    @classmethod
    def from_dict(cls, data: Any) -> ApiTimeout:
        if data is None:
            return cls()
        if isinstance(data, ApiTimeout):
            return data
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise BackendError("bad apiTimeout: " + "; ".join(explain(exc, cls))) from None


class ClusterSettings(StrictModel):
    """How TrainJobs become pods; see the module docstring."""

    namespace: str = Field(
        "aviflow", description="The jobs' namespace, unless `queueNamespaces` names them."
    )
    queue_namespaces: dict[str, str] = Field(
        default_factory=dict,
        alias="queueNamespaces",
        description="Each team's queue and the namespace of its LocalQueue, where its jobs "
        "run (one namespace per team). When set, the only queues jobs may use.",
    )
    image: str | None = Field(
        None,
        description="The default trainer image: a name from `images`, or the one reference "
        "jobs may run in when `images` is empty (default: the first of `images`).",
    )
    images: list[ImageEntry] = Field(
        default_factory=list,
        description="The trainer images `--image` may pick, and the only images a trainer "
        "pod may run (when empty: `image` alone).",
    )
    python: str = Field("python", description="The trainer image's Python.")
    run_as_user: int = Field(
        1000,
        alias="runAsUser",
        ge=1,
        description="The uid trainer pods run as (never root); it owns each job's directory.",
    )
    run_as_group: int = Field(1000, alias="runAsGroup", ge=0, description="Their gid.")
    runs: RunStoreVolume = Field(default_factory=RunStoreVolume)
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"aviflow.dev/node-pool": "hgx"}, alias="nodeSelector"
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=lambda: list(DEFAULT_TOLERATIONS))
    gpu_resource: str = Field("nvidia.com/gpu", alias="gpuResource")
    cpu_per_gpu: int | str | None = Field(
        16,
        alias="cpuPerGpu",
        description="CPU per GPU (request = limit) when a spec gives none: with memoryPerGpu, "
        "trainer pods are Guaranteed (the kubelet evicts them last and can pin their CPUs). "
        "The default fits an HGX node (8 GPUs, 2 x 56 cores, 2 TiB) with room for its "
        "daemons. null: no CPU request.",
    )
    memory_per_gpu: str | None = Field(
        "192Gi",
        alias="memoryPerGpu",
        description="Memory per GPU (request = limit) when a spec gives none; /dev/shm counts "
        "against it. null: no memory request (BestEffort or Burstable pods).",
    )
    shm_size: str = Field("64Gi", alias="shmSize", description="Size of /dev/shm (in memory).")
    scratch: list[str] = Field(
        default_factory=lambda: ["/tmp", "/home/aviflow"],
        description="The writable directories of trainer pods, each an emptyDir (their root "
        "file system is read-only): temporary files and $HOME's caches (torch, Hugging Face).",
    )
    topology: Topology = Field(default_factory=Topology)
    termination_grace_seconds: int = Field(30, alias="terminationGraceSeconds", ge=0, le=3600)
    finished_ttl_seconds: int | None = Field(
        3600,
        alias="finishedTtlSeconds",
        ge=0,
        description="Seconds a finished attempt's Job and pods stay (kubectl logs) before "
        "Kubernetes deletes them (ttlSecondsAfterFinished); its end, logs' tail and usage are "
        "recorded by then. null: kept until the TrainJob is deleted.",
    )
    priority_class: str | None = Field(
        None, alias="priorityClass", description="A Kueue WorkloadPriorityClass for every job."
    )
    network_policy: bool = Field(
        True,
        alias="networkPolicy",
        description="Give each job a NetworkPolicy: its pods take traffic only from each "
        "other and reach only each other, DNS and `egress`.",
    )
    egress: list[EgressRule] = Field(
        default_factory=list,
        description="What trainer pods may reach besides their own job and DNS (a package "
        f"mirror, a model hub); {METADATA_CIDR}, the cloud's metadata, never.",
    )
    rank_log_cap: RankLogCap = DEFAULT_JOB_LOG_CAP
    usage: UsageSettings = Field(
        default_factory=UsageSettings,
        description="How often the controller records a running job's GPU/CPU use, and the "
        "idle rule (README: throughput and use).",
    )

    runtimes: dict[str, TrainingRuntime] = Field(
        default_factory=dict,
        description="Training runtimes by name (a DNS-1123 label): what trainer pods get "
        "beyond Aviflow's own pod (RDMA devices, a network, NCCL settings, capabilities, "
        "hostNetwork, volumes such as a shared model cache). A job picks one with "
        "spec.runtime (--runtime); README: Training runtimes.",
        json_schema_extra={"propertyNames": {"pattern": DNS1123_LABEL.pattern, "maxLength": 63}},
    )
    default_runtime: str | None = Field(
        None,
        alias="defaultRuntime",
        description="The runtime of a job that names none (one of runtimes); null: none.",
    )
    pod_security: PodSecurityLevel = Field(
        "restricted",
        alias="podSecurity",
        description="The Pod Security level the teams' namespaces enforce (the chart labels "
        "them so). A runtime that needs more is refused when the settings load; privileged "
        "(for hostNetwork or IPC_LOCK) cannot go with kubectlAccess.jobs.",
    )

    @field_validator("cpu_per_gpu", "memory_per_gpu")
    @classmethod
    def _per_gpu(cls, v: int | str | None) -> int | str | None:
        if v is not None and not PER_GPU_QUANTITY.fullmatch(str(v)):
            raise ValueError(
                f"{str(v)[:40]!r} is not a whole-number quantity such as 16, 500m or 192Gi"
            )
        return v

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a namespace name ({DNS1123_LABEL.pattern})")
        return v

    @property
    def rank_log_cap_bytes(self) -> int | None:
        """``rankLogCap`` in bytes (None: no cap)."""
        return job_log_cap(self.rank_log_cap)

    @field_validator("queue_namespaces")
    @classmethod
    def _queue_namespaces(cls, v: dict[str, str]) -> dict[str, str]:
        for queue, ns in v.items():
            if not is_dns1123_label(queue):
                raise ValueError(f"{queue!r} is not a queue name ({DNS1123_LABEL.pattern})")
            if not is_dns1123_label(ns):
                raise ValueError(f"{queue}: {ns!r} is not a namespace name")
        return v

    def job_namespaces(self) -> list[str]:
        """Every namespace jobs run in (the controller watches each)."""
        return sorted(set(self.queue_namespaces.values())) or [self.namespace]

    def in_namespace(self, namespace: str) -> ClusterSettings:
        """These settings for the jobs of ``namespace`` (the builders place objects there)."""
        return (
            self
            if namespace == self.namespace
            else self.model_copy(update={"namespace": namespace})
        )

    def for_queue(self, queue: str) -> ClusterSettings:
        """These settings for a job of ``queue``: its team's namespace. A queue no team has
        is refused, naming those there are.

        >>> s = ClusterSettings.from_dict({"queueNamespaces": {"vision": "team-vision"}})
        >>> s.for_queue("vision").namespace
        'team-vision'
        """
        if not self.queue_namespaces:
            return self
        ns = self.queue_namespaces.get(queue)
        if ns is None:
            raise SpecError(
                f"queue {queue!r} is no team's queue; use one of "
                f"{', '.join(sorted(self.queue_namespaces))}"
            )
        return self.in_namespace(ns)

    @model_validator(mode="after")
    def _catalogue(self) -> ClusterSettings:
        names = [i.name for i in self.images]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"images: {', '.join(map(repr, twice))} named more than once")
        if self.image is not None:
            if not IMAGE_REFERENCE.fullmatch(self.image):
                raise ValueError(f"image: {self.image!r} is not an image reference")
            if self.images and not any(self.image in (i.name, i.image) for i in self.images):
                raise ValueError(
                    f"image: {self.image!r} is none of `images` ({', '.join(names)}); "
                    "name one of them, or add it there"
                )
        return self

    @model_validator(mode="after")
    def _runtimes(self) -> ClusterSettings:
        from aviflow.k8s.manifests import RESUME_MOUNT

        if self.default_runtime is not None and self.default_runtime not in self.runtimes:
            raise ValueError(
                f"defaultRuntime: {self.default_runtime!r} is none of runtimes "
                f"({', '.join(sorted(self.runtimes)) or 'none configured'})"
            )
        reserved = (self.runs.mount_path, RESUME_MOUNT, "/dev/shm", *self.scratch)
        found = problems(self.runtimes, self.pod_security, (self.runs.claim_name,), reserved)
        found += [
            f"runtimes.{name}.resources: {self.gpu_resource} is the spec's (gpusPerNode)"
            for name, rt in sorted(self.runtimes.items())
            if self.gpu_resource in rt.resources
        ]
        if found:
            raise ValueError("; ".join(found))
        return self

    def runtime(self, name: str | None) -> tuple[str, TrainingRuntime] | None:
        """The runtime a job naming ``name`` runs with (None: the default), or None when it
        has none. A name not configured is refused, naming those there are."""
        name = name or self.default_runtime
        if name is None:
            return None
        missing = self.missing_runtime(name)
        if missing is not None:
            raise SpecError(missing)
        return name, self.runtimes[name]

    def missing_runtime(self, name: str | None) -> str | None:
        """Why a job naming the runtime ``name`` (None: the default) cannot run here, naming
        the runtimes there are; None when it can. The controller asks it before each
        attempt: an admin may have removed the runtime a queued job pinned.

        >>> s = ClusterSettings.from_dict({"runtimes": {"ib": {}}})
        >>> s.missing_runtime("ib") is None
        True
        >>> print(s.missing_runtime("roce"))  # doctest: +NORMALIZE_WHITESPACE
        spec.runtime: 'roce' is not a training runtime of this cluster; use one of: ib (an
        admin sets api.kubernetes.runtimes)
        """
        name = name or self.default_runtime
        if name is None or name in self.runtimes:
            return None
        known = ", ".join(sorted(self.runtimes)) or "none are configured"
        return (
            f"spec.runtime: {name!r} is not a training runtime of this cluster; use one "
            f"of: {known} (an admin sets api.kubernetes.runtimes)"
        )

    def pin_runtime(self, job: TrainJob) -> TrainJob:
        """The job with its runtime named (the default when it names none): every attempt
        runs with it, whatever ``defaultRuntime`` says later. Refuses an unknown one."""
        picked = self.runtime(job.spec.runtime)
        if picked is None or picked[0] == job.spec.runtime:
            return job
        return job.with_changes(runtime=picked[0])

    def trainer_images(self) -> list[TrainerImage]:
        """The images jobs may run in, the default first. Without a configured list: the
        default image alone, its packages unknown; without that either, none (every job is
        refused, naming the setting)."""
        if not self.images:
            return [TrainerImage("default", self.image)] if self.image else []
        records = [i.record() for i in self.images]
        default = pick(records, self.image)
        return [default, *(r for r in records if r is not default)]

    def pod_ids(self) -> tuple[int, int] | None:
        """Whom a new job directory is given to: the pods' uid and gid, when this process
        may chown (root); else None (aviflow-api and the controller run as ``runAsUser``)."""
        return (self.run_as_user, self.run_as_group) if os.geteuid() == 0 else None

    def reference(self, wanted: str | None) -> str:
        """The reference pods pull for a spec's ``image`` (pure, never refuses): a configured
        name becomes its reference, a reference stays as it is (``submit`` checked it
        against the list then; the list may change while the job lives), none is the
        default."""
        if wanted is None:
            return self.resolve_image(None).image
        return next((i.image for i in self.images if i.name == wanted), wanted)

    def pin_image(self, job: TrainJob) -> tuple[TrainJob, TrainerImage]:
        """The job with its image resolved to a reference, and that image: every attempt
        runs in it, whatever the list says later (``submit`` and the controller's adoption
        of a kubectl TrainJob both pin)."""
        image = self.resolve_image(job.spec.image)
        return job.with_changes(image=image.image), image

    def resolve_image(self, wanted: str | None) -> TrainerImage:
        """The image a job asking for ``wanted`` runs in (see :func:`aviflow.images.pick`):
        only a configured one, never any reference (a SpecError names the choices)."""
        images = self.trainer_images()
        if not images:
            raise SpecError(
                "spec.image: no trainer image is configured; an admin sets "
                "api.kubernetes.images (or image)"
            )
        return pick(images, wanted)

    @field_validator("scratch")
    @classmethod
    def _scratch(cls, v: list[str]) -> list[str]:
        v = [mount_path(path, reserved=("/dev/shm",)) for path in v]  # the pods' own /dev/shm
        if len(set(v)) != len(v):
            raise ValueError("a scratch directory is named twice")
        return v

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not _LABEL_KEY.fullmatch(key):
                raise ValueError(f"{key!r} is not a node label key")
        return v

    @classmethod
    def from_dict(cls, data: Any) -> ClusterSettings:
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise BackendError(f"kubernetes settings must be a mapping, got {type(data).__name__}")
        problems = storable_problems(data)
        if problems:
            raise BackendError("bad kubernetes settings: " + "; ".join(problems))
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise BackendError("bad kubernetes settings: " + "; ".join(explain(exc, cls))) from None

    @classmethod
    def load(cls, path: str | Path) -> ClusterSettings:
        try:
            data = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as exc:
            raise BackendError(f"cannot read kubernetes settings {path}: {exc}") from None
        return cls.from_dict(data)
