"""``ClusterSettings``: where and how TrainJobs run on a cluster, from one config section.

The Kubernetes backend (``api.kubernetes`` in the hub config, ``AVIFLOW_K8S_CONFIG`` or
``--config`` for the CLI) and the controller read the same section; the builders in
:mod:`aviflow.k8s.manifests` take it as it is. Keys are camelCase like the spec's.

>>> s = ClusterSettings.from_dict({"namespace": "ml", "image": "trainer:1"})
>>> s.namespace, s.runs.mount_path, s.gpu_resource
('ml', '/aviflow/runs', 'nvidia.com/gpu')
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from aviflow._model import StrictModel, explain, storable_problems
from aviflow.errors import BackendError
from aviflow.names import DNS1123_LABEL, is_dns1123_label

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
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a PersistentVolumeClaim name")
        return v

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, v: str) -> str:
        if not v.startswith("/") or ".." in Path(v).parts or v.rstrip("/") == "":
            raise ValueError(f"{v!r} must be an absolute path other than '/'")
        return v.rstrip("/")


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


class ClusterSettings(StrictModel):
    """How TrainJobs become pods; see the module docstring."""

    namespace: str = "aviflow"
    image: str = "aviflow/trainer:latest"
    python: str = Field("python", description="The trainer image's Python.")
    runs: RunStoreVolume = Field(default_factory=RunStoreVolume)
    node_selector: dict[str, str] = Field(
        default_factory=lambda: {"aviflow.dev/node-pool": "hgx"}, alias="nodeSelector"
    )
    tolerations: list[dict[str, Any]] = Field(default_factory=lambda: list(DEFAULT_TOLERATIONS))
    gpu_resource: str = Field("nvidia.com/gpu", alias="gpuResource")
    cpu_per_gpu: int | str | None = Field(
        None, alias="cpuPerGpu", description="CPU request per GPU when a spec gives none."
    )
    memory_per_gpu: str | None = Field(
        None, alias="memoryPerGpu", description="Memory request per GPU when a spec gives none."
    )
    shm_size: str = Field("64Gi", alias="shmSize", description="Size of /dev/shm (in memory).")
    topology: Topology = Field(default_factory=Topology)
    termination_grace_seconds: int = Field(30, alias="terminationGraceSeconds", ge=0, le=3600)
    priority_class: str | None = Field(
        None, alias="priorityClass", description="A Kueue WorkloadPriorityClass for every job."
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not is_dns1123_label(v):
            raise ValueError(f"{v!r} is not a namespace name ({DNS1123_LABEL.pattern})")
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
