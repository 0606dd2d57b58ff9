"""Training runtimes: what an admin gives trainer pods beyond Aviflow's own pod, by name.

A runtime (``api.kubernetes.runtimes.<name>``) adds, to every pod of a job that picks it
(``spec.runtime``, default ``api.kubernetes.defaultRuntime``): extended resources such as
RDMA devices, pod annotations such as a Multus network, environment variables such as NCCL's,
capabilities from a short allow-list, the node's network, node labels, tolerations and
PersistentVolumeClaims such as a shared Hugging Face cache. Only an admin writes one: a spec
names a runtime and nothing else, so a capability or the host network is a runtime's, never a
user's.

What a runtime needs of Pod Security is computed (:meth:`TrainingRuntime.pod_security`): the
cluster settings refuse a runtime that the jobs' namespaces' level (``podSecurity``) forbids,
instead of a job whose pods are never created.

>>> rt = TrainingRuntime.model_validate({"resources": {"rdma/ib": 1}, "capabilities": ["IPC_LOCK"]})
>>> rt.pod_security(), rt.needs()
('privileged', ['capabilities IPC_LOCK'])
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Any, Literal, get_args

from pydantic import Field, ValidationInfo, field_validator

from aviflow._model import StrictModel
from aviflow.names import DNS1123_LABEL, claim_name, is_dns1123_label, mount_path
from aviflow.runtime.env import NAMES as RUNTIME_ENV_NAMES
from aviflow.spec import RESERVED_ENV

PodSecurityLevel = Literal["restricted", "baseline", "privileged"]
LEVELS: tuple[str, ...] = get_args(PodSecurityLevel)
# The capabilities a runtime may add, each with the least Pod Security level that allows it
# (restricted: NET_BIND_SERVICE alone; baseline adds none of the others). What a fabric needs:
# IPC_LOCK and SYS_RESOURCE to pin memory for RDMA, NET_RAW for RoCE tools. Nothing broader
# (SYS_ADMIN, NET_ADMIN, ...) is on the list: it would be the node's, not the job's.
Capability = Literal["IPC_LOCK", "SYS_RESOURCE", "NET_RAW", "NET_BIND_SERVICE"]
CAPABILITY_LEVEL: dict[str, PodSecurityLevel] = {
    "IPC_LOCK": "privileged",
    "SYS_RESOURCE": "privileged",
    "NET_RAW": "privileged",
    "NET_BIND_SERVICE": "restricted",
}
# Variables the runtime and its launcher set or clear on every node (aviflow.runtime.launch)
OWNED_ENV = frozenset({*RESERVED_ENV, *RUNTIME_ENV_NAMES, "ACCELERATE_USE_CPU", "PYTHONUNBUFFERED"})
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
# an extended resource: always domain-prefixed (cpu, memory, hugepages are the pod's own)
RESOURCE_NAME = re.compile(rf"^{_DNS_SUBDOMAIN}/{_NAME}$")
QUALIFIED_KEY = re.compile(rf"^({_DNS_SUBDOMAIN}/)?{_NAME}$")
# prefixes a runtime's resources and annotations may not use: Kubernetes', Kueue's
# (topology, priority) and Aviflow's own
_KEPT_PREFIXES = ("kubernetes.io/", "k8s.io/", "kueue.x-k8s.io/", "aviflow.dev/")
_TOLERATION_KEYS = frozenset({"key", "operator", "value", "effect", "tolerationSeconds"})
MAX_ANNOTATION_BYTES = 64 * 1024
RUNTIME_VOLUME_PREFIX = "rt-"
ANNOTATION_RUNTIME = "aviflow.dev/runtime"  # which runtime a pod has


def _kept(key: str) -> bool:
    prefix = key.split("/", 1)[0] + "/" if "/" in key else ""
    return any(prefix == p or prefix.endswith("." + p) for p in _KEPT_PREFIXES)


class RuntimeVolume(StrictModel):
    """A PersistentVolumeClaim of every team's namespace, mounted in each pod: a shared model
    and dataset cache, say (a claim cannot cross namespaces: one of this name in each)."""

    name: str = Field(
        description="The volume's name in the pod is `rt-<name>` (a DNS-1123 label).",
        json_schema_extra={"pattern": DNS1123_LABEL.pattern, "maxLength": 60},
    )
    claim_name: str = Field(alias="claimName", description="The claim, in each team's namespace.")
    mount_path: str = Field(alias="mountPath", description="Where the pods see it.")
    sub_path: str | None = Field(None, alias="subPath", description="A directory of the volume.")
    read_only: bool = Field(False, alias="readOnly")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not is_dns1123_label(v, 60):
            raise ValueError(f"{v!r} is not a volume name (a DNS-1123 label of at most 60)")
        return v

    @field_validator("claim_name")
    @classmethod
    def _claim(cls, v: str) -> str:
        return claim_name(v)

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, v: str) -> str:
        return mount_path(v)

    @field_validator("sub_path")
    @classmethod
    def _sub_path(cls, v: str | None) -> str | None:
        if v is not None and (not v or v.startswith("/") or ".." in PurePosixPath(v).parts):
            raise ValueError(f"{v!r} must be a relative path inside the volume, without '..'")
        return v


class TrainingRuntime(StrictModel):
    """What a job's pods get from the runtime it picks (see the module docstring)."""

    description: str = Field("", description="What it is for (shown to users).", max_length=500)
    resources: dict[str, int] = Field(
        default_factory=dict,
        description="Extended resources per pod (request = limit), e.g. "
        "{rdma/hca_shared_devices_a: 1}: domain-prefixed names, whole numbers. Kueue must cover "
        "them in the ClusterQueues or ignore them (its resources.excludeResourcePrefixes).",
        json_schema_extra={
            "propertyNames": {"pattern": RESOURCE_NAME.pattern},
            "additionalProperties": {"type": "integer", "minimum": 1, "maximum": 1024},
        },
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Pod annotations, e.g. k8s.v1.cni.cncf.io/networks for a Multus network.",
        json_schema_extra={"propertyNames": {"pattern": QUALIFIED_KEY.pattern}},
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables of every rank (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, "
        "HF_HOME, ...); a spec's env wins over them, the runtime's own (AVIFLOW_*, RANK, "
        "...) cannot be given.",
        json_schema_extra={"propertyNames": {"pattern": ENV_NAME.pattern}},
    )
    capabilities: list[Capability] = Field(
        default_factory=list,
        description="Linux capabilities added to the trainer container (every other one stays "
        "dropped). All but NET_BIND_SERVICE need podSecurity: privileged.",
    )
    host_network: bool = Field(
        False,
        alias="hostNetwork",
        description="Run the pods in their node's network namespace (some RDMA fabrics need "
        "it): needs podSecurity: privileged; the job's NetworkPolicy and the egress "
        "allow-list do not hold for such pods, which reach whatever their node reaches.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict,
        alias="nodeSelector",
        description="Node labels added to nodeSelector (a key given there takes this value).",
        json_schema_extra={"propertyNames": {"pattern": QUALIFIED_KEY.pattern}},
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list, description="Tolerations added to the settings' tolerations."
    )
    volumes: list[RuntimeVolume] = Field(
        default_factory=list,
        description="PersistentVolumeClaims mounted in every pod (a shared model cache).",
    )

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, int]) -> dict[str, int]:
        for name, amount in v.items():
            if not RESOURCE_NAME.fullmatch(name) or len(name) > 253 or _kept(name):
                raise ValueError(
                    f"{name!r} is not an extended resource name (domain/name, e.g. "
                    "rdma/hca_shared_devices_a, outside kubernetes.io); cpu and memory are "
                    "cpuPerGpu's and memoryPerGpu's"
                )
            if not 1 <= amount <= 1024:
                raise ValueError(f"{name}: {amount} is not a whole number from 1 to 1024")
        return v

    @field_validator("annotations", "node_selector")
    @classmethod
    def _keys(cls, v: dict[str, str], info: ValidationInfo) -> dict[str, str]:
        kept = _kept if info.field_name == "annotations" else lambda key: False
        for key in v:
            if not QUALIFIED_KEY.fullmatch(key) or len(key) > 253 or kept(key):
                outside = f" outside {', '.join(_KEPT_PREFIXES)}" if kept is _kept else ""
                raise ValueError(
                    f"{key!r} is not a key a runtime may set (a qualified name{outside})"
                )
        if sum(len(k) + len(x) for k, x in v.items()) > MAX_ANNOTATION_BYTES:
            raise ValueError(f"more than {MAX_ANNOTATION_BYTES} bytes of keys and values")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key, value in v.items():
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"{key!r} is not a variable name ([A-Za-z_][A-Za-z0-9_]*)")
            if key in OWNED_ENV or key.startswith("AVIFLOW_"):
                raise ValueError(f"{key} is set by Aviflow's runtime; a runtime cannot set it")
            if len(value) > 32768:
                raise ValueError(f"{key}: the value is longer than 32768 characters")
        return v

    @field_validator("capabilities")
    @classmethod
    def _capabilities(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("a capability is named twice")
        return v

    @field_validator("tolerations")
    @classmethod
    def _tolerations(cls, v: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for t in v:
            unknown = sorted(set(t) - _TOLERATION_KEYS)
            if unknown:
                raise ValueError(f"a toleration has unknown keys {unknown}")
        return v

    @field_validator("volumes")
    @classmethod
    def _volumes(cls, v: list[RuntimeVolume]) -> list[RuntimeVolume]:
        for attr in ("name", "mount_path"):
            seen = [getattr(vol, attr) for vol in v]
            twice = sorted({x for x in seen if seen.count(x) > 1})
            if twice:
                raise ValueError(f"volumes: {', '.join(twice)} given twice")
        return v

    def needs(self) -> list[str]:
        """What of this runtime needs Pod Security ``privileged`` (empty: restricted will do)."""
        out = []
        caps = [c for c in self.capabilities if CAPABILITY_LEVEL[c] == "privileged"]
        if caps:
            out.append(f"capabilities {', '.join(caps)}")
        if self.host_network:
            out.append("hostNetwork")
        return out

    def pod_security(self) -> PodSecurityLevel:
        """The least Pod Security level whose namespaces admit this runtime's pods."""
        return "privileged" if self.needs() else "restricted"


def problems(
    runtimes: dict[str, TrainingRuntime],
    level: str,
    protected: tuple[str, ...],
    reserved_paths: tuple[str, ...],
) -> list[str]:
    """What is wrong with ``runtimes`` against the cluster settings: a namespace level
    ``level`` that refuses their pods, a volume of a ``protected`` claim (the run store), a
    mount over one of Aviflow's own paths (``reserved_paths``). One line each."""
    out = []
    for name, rt in sorted(runtimes.items()):
        if not is_dns1123_label(name):
            out.append(f"runtimes: {name!r} is not a runtime name ({DNS1123_LABEL.pattern})")
        if LEVELS.index(rt.pod_security()) > LEVELS.index(level):
            out.append(
                f"runtimes.{name}: {' and '.join(rt.needs())} need Pod Security "
                f"{rt.pod_security()}, and the jobs' namespaces enforce {level} (podSecurity): "
                "their pods would never be created. Set podSecurity: privileged (the chart "
                "labels the teams' namespaces so), or drop them from the runtime"
            )
        for vol in rt.volumes:
            if vol.claim_name in protected:
                out.append(
                    f"runtimes.{name}.volumes.{vol.name}: {vol.claim_name} is the run store's "
                    "claim, which holds every user's runs; pods mount their own job's part only"
                )
            for path in reserved_paths:
                inner, outer = PurePosixPath(vol.mount_path), PurePosixPath(path)
                if inner == outer or outer in inner.parents or inner in outer.parents:
                    out.append(
                        f"runtimes.{name}.volumes.{vol.name}: mountPath {vol.mount_path} "
                        f"overlaps {path}, which Aviflow mounts itself"
                    )
    return out


def apply(pod: dict[str, Any], runtime: TrainingRuntime, name: str) -> None:
    """Give the pod template ``pod`` (``metadata`` and ``spec``, its one container the
    trainer, built by :func:`aviflow.k8s.manifests.attempt_job`) the runtime ``name``."""
    meta, spec = pod["metadata"], pod["spec"]
    (container,) = spec["containers"]
    meta["annotations"] = {**runtime.annotations, **meta["annotations"], ANNOTATION_RUNTIME: name}
    env = {e["name"]: e for e in container["env"]}
    env.update({k: {"name": k, "value": v} for k, v in runtime.env.items() if k not in env})
    container["env"] = [env[k] for k in sorted(env)]
    for part in ("requests", "limits"):
        for res, amount in sorted(runtime.resources.items()):
            container["resources"][part][res] = str(amount)
    if runtime.capabilities:
        container["securityContext"]["capabilities"]["add"] = sorted(runtime.capabilities)
    if runtime.host_network:
        spec["hostNetwork"] = True
        spec["dnsPolicy"] = "ClusterFirstWithHostNet"  # the job's Service names still resolve
    spec["nodeSelector"] = {**spec["nodeSelector"], **runtime.node_selector}
    spec["tolerations"] = [*spec["tolerations"], *(dict(t) for t in runtime.tolerations)]
    for vol in runtime.volumes:
        volume = RUNTIME_VOLUME_PREFIX + vol.name
        mount: dict[str, Any] = {"name": volume, "mountPath": vol.mount_path}
        if vol.sub_path:
            mount["subPath"] = vol.sub_path
        if vol.read_only:
            mount["readOnly"] = True
        container["volumeMounts"].append(mount)
        claim: dict[str, Any] = {"claimName": vol.claim_name}
        if vol.read_only:
            claim["readOnly"] = True
        spec["volumes"].append({"name": volume, "persistentVolumeClaim": claim})
