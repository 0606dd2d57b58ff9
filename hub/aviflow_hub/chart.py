"""The Helm chart's values (``helm/aviflow/values.yaml``), derived from the hub config model.

The values are the hub config (:class:`~aviflow_hub.config.HubConfig`, the same sections as
``hub/local.yaml``) less the keys the chart owns (where the hub listens, its state directory,
the spawner and backend, the namespace: :data:`CHART_OWNED`), plus chart-only sections
(:class:`ChartOnly`: images, the Kueue flavor and priority classes, the run-store volume).
The chart renders the hub config from them and the hub loads it with the same strict loader.

``values.schema.json`` (every object closed, so Helm names an unknown key before anything
is applied) and the admins' values reference ``VALUES.md`` are generated from the models
(``python -m aviflow_hub.chart helm/aviflow``); ``tests/helm`` fails when they are stale.

>>> schema = values_schema()
>>> schema["additionalProperties"], "bind" in schema["$defs"]["HubSection"]["properties"]
(False, False)
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from aviflow._model import StrictModel
from aviflow.names import DNS1123_LABEL
from aviflow_hub.config import HubConfig
from aviflow_hub.kube_spawner import HUB_RULES

# Keys of the hub config that the chart sets itself (the templates render them): a value
# file that sets one fails the schema, naming it.
CHART_OWNED: dict[str, tuple[str, ...]] = {
    "HubSection": (
        "bind", "port", "hubPort", "proxyApiPort", "proxyUrl", "hubConnectUrl", "dataDir", "dbUrl",
        "spawner", "namespace", "notebookBind",
    ),
    "ApiSection": (
        "bind", "port", "url", "notebookUrl", "backend", "runRoot", "local", "external",
    ),
    "KubernetesSection": (
        "namespace", "queueNamespaces", "kubeconfig", "context", "runs", "networkPolicy",
    ),
}  # fmt: skip


class Image(StrictModel):
    repository: str = Field(description="Registry and path, e.g. registry.example.com/aviflow/hub.")
    tag: str = Field(description="`make images` tags `<version>-<lock hash>`.")
    digest: str | None = Field(
        None,
        description="sha256:... pins the image (`repository:tag@digest`): a moved tag "
        "changes nothing.",
        pattern=r"^sha256:[0-9a-f]{64}$",
    )
    pull_policy: Literal["Always", "IfNotPresent", "Never"] = Field(
        "IfNotPresent", alias="pullPolicy"
    )


class Images(StrictModel):
    """The hub image (JupyterHub, the proxy, aviflow-api) and the controller's (the trainer
    image). Notebook and trainer images for users are in ``profiles`` and
    ``api.kubernetes.images``."""

    hub: Image = Field(
        default_factory=lambda: Image(repository="localhost/aviflow/hub", tag="0.1.0")  # type: ignore[call-arg]
    )
    controller: Image = Field(
        default_factory=lambda: Image(repository="localhost/aviflow/trainer", tag="0.1.0")  # type: ignore[call-arg]
    )


class PriorityClass(StrictModel):
    name: str = Field(json_schema_extra={"pattern": DNS1123_LABEL.pattern})
    value: int = Field(description="Higher is admitted first and may preempt lower.")
    description: str = ""


class Flavor(StrictModel):
    """The HGX pool as Kueue sees it: one ResourceFlavor with a Topology."""

    name: str = Field("hgx", json_schema_extra={"pattern": DNS1123_LABEL.pattern})
    node_labels: dict[str, str] = Field(
        default_factory=lambda: {"aviflow.dev/node-pool": "hgx"}, alias="nodeLabels"
    )
    tolerations: list[dict[str, Any]] = Field(
        default_factory=lambda: [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    )
    topology_levels: list[str] = Field(
        default_factory=lambda: [
            "topology.aviflow.dev/block",
            "topology.aviflow.dev/rack",
            "kubernetes.io/hostname",
        ],
        alias="topologyLevels",
        description="Node labels from the widest domain to the node (Kueue Topology levels).",
    )


class Kueue(StrictModel):
    flavor: Flavor = Field(default_factory=lambda: Flavor())
    gpu_resource: str = Field("nvidia.com/gpu", alias="gpuResource")
    priority_classes: list[PriorityClass] = Field(
        default_factory=list,
        alias="priorityClasses",
        description="WorkloadPriorityClasses jobs may name (api.kubernetes.priorityClass).",
    )


class RunStore(StrictModel):
    """The shared run store: one ReadWriteMany volume that aviflow-api and the controller (in
    the release's namespace) and every job's pods (in its team's namespace) mount. A claim
    cannot cross namespaces: with teams, name the volume (``volume``: the chart makes a
    PersistentVolume and its claim in each of those namespaces) or your own claims
    (``existingClaim``)."""

    size: str = "1Ti"
    volume: dict[str, Any] | None = Field(
        None,
        description="A PersistentVolume's source for the run store, e.g. {nfs: {server: "
        "10.0.0.2, path: /exports/aviflow}} or {csi: {driver: ..., volumeHandle: ...}}: one "
        "PersistentVolume (Retain) and claim per namespace, each bound to the other.",
    )
    storage_class: str | None = Field(
        None,
        alias="storageClass",
        description="Without volume or existingClaim: the class of the one claim in the "
        "release's namespace (ReadWriteMany; default: the cluster's). Not with teams.",
    )
    existing_claim: str | None = Field(
        None,
        alias="existingClaim",
        description="A claim of this name, made by you, in the release's namespace and in "
        "every team's, all on the same volume.",
    )


class Namespaces(StrictModel):
    """Namespaces by trust: the control plane (hub, proxy, aviflow-api, the controller, their
    service accounts and Secrets) in the release's; users' notebooks in ``notebooks``; each
    team's TrainJobs and trainer pods in its own (``teams[].namespace``). Each user namespace
    enforces Pod Security ``restricted`` and holds no control-plane account, Secret or claim."""

    create: bool = Field(
        True,
        description="Create the notebooks' and the teams' namespaces (labelled for Pod Security "
        "restricted; kept on uninstall). False: they exist, labelled by you.",
    )
    notebooks: str | None = Field(
        None,
        description="The notebooks' namespace (default: <release>-notebooks).",
        pattern=DNS1123_LABEL.pattern,
    )


class KubectlAccess(StrictModel):
    """kubectl for team members: in each team's namespace, a RoleBinding of the team's
    groups (``teams[].groups``, as your API server's authenticator names them) to the
    member role (``aviflow.k8s.rbac.MEMBER_RULES``)."""

    enabled: bool = Field(
        False, description="TrainJobs: create, read, cancel; their pods' logs; the queue."
    )
    jobs: bool = Field(False, description="Also plain Kueue Jobs (held to the team's queue).")


class ProxyHttps(StrictModel):
    """TLS at the proxy (as Zero-to-JupyterHub's ``proxy.https`` with ``type: secret``):
    configurable-http-proxy serves HTTPS with the certificate and key of a TLS Secret."""

    enabled: bool = False
    secret: str | None = Field(
        None,
        description="A kubernetes.io/tls Secret in the release's namespace (tls.crt, tls.key), "
        "e.g. made by cert-manager.",
    )


class ProxyService(StrictModel):
    """The users' address: the Service in front of configurable-http-proxy's public port."""

    type: Literal["LoadBalancer", "NodePort", "ClusterIP"] = "LoadBalancer"
    port: int = Field(80, ge=1, le=65535, description="The Service's port (443 with https).")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="E.g. a cloud load balancer's settings."
    )
    https: ProxyHttps = Field(default_factory=lambda: ProxyHttps())


class IngressTls(StrictModel):
    secret_name: str = Field(alias="secretName")
    hosts: list[str] = Field(default_factory=list)


class Ingress(StrictModel):
    """An Ingress in front of the proxy's Service (TLS at the ingress controller), as
    Zero-to-JupyterHub's ``ingress``."""

    enabled: bool = False
    class_name: str | None = Field(None, alias="className", description="The IngressClass.")
    annotations: dict[str, str] = Field(
        default_factory=dict, description="E.g. cert-manager.io/cluster-issuer."
    )
    hosts: list[str] = Field(default_factory=list, description="Host names (default: any).")
    path: str = "/"
    tls: list[IngressTls] = Field(default_factory=list)


class State(StrictModel):
    """The hub's database and aviflow-api's ledger (SQLite), each on a ReadWriteOnce claim
    kept on uninstall (aviflow-api's only when ``api.database`` is unset)."""

    size: str = "1Gi"
    storage_class: str | None = Field(None, alias="storageClass")


class PodResources(StrictModel):
    """One container's ``resources``: requests and limits by resource name."""

    requests: dict[str, str | int] = Field(default_factory=dict)
    limits: dict[str, str | int] = Field(default_factory=dict)


def _resources(cpu: str, memory: str, limit: str) -> PodResources:
    return PodResources(requests={"cpu": cpu, "memory": memory}, limits={"memory": limit})


class Resources(StrictModel):
    """What the control plane's containers ask for (each Burstable: a CPU and memory request
    and a memory limit). Raise the hub's and aviflow-api's with many users."""

    hub: PodResources = Field(default_factory=lambda: _resources("200m", "512Mi", "1Gi"))
    proxy: PodResources = Field(default_factory=lambda: _resources("100m", "128Mi", "512Mi"))
    api: PodResources = Field(default_factory=lambda: _resources("200m", "512Mi", "1Gi"))
    controller: PodResources = Field(default_factory=lambda: _resources("200m", "256Mi", "1Gi"))


class ChartOnly(StrictModel):
    """The sections only the chart has."""

    images: Images = Field(default_factory=lambda: Images())
    proxy: ProxyService = Field(default_factory=lambda: ProxyService())
    ingress: Ingress = Field(default_factory=lambda: Ingress())
    state: State = Field(default_factory=lambda: State())
    resources: Resources = Field(default_factory=lambda: Resources())
    kueue: Kueue = Field(default_factory=lambda: Kueue())
    run_store: RunStore = Field(default_factory=lambda: RunStore(), alias="runStore")
    namespaces: Namespaces = Field(default_factory=lambda: Namespaces())
    kubectl_access: KubectlAccess = Field(
        default_factory=lambda: KubectlAccess(), alias="kubectlAccess"
    )
    network_policy: bool = Field(
        True,
        alias="networkPolicy",
        description="NetworkPolicies: notebook pods reach the hub, the proxy and aviflow-api "
        "only; each job's pods reach each other, DNS and api.kubernetes.egress only.",
    )


def values_schema() -> dict[str, Any]:
    """``values.schema.json``: the hub config's schema less :data:`CHART_OWNED`, plus the
    chart-only sections (draft 2020-12, as Helm 4 reads it)."""
    hub = HubConfig.model_json_schema(by_alias=True)
    extra = ChartOnly.model_json_schema(by_alias=True)
    schema = copy.deepcopy(hub)
    for name, owned in CHART_OWNED.items():
        definition = schema["$defs"][name]
        for key in owned:
            definition["properties"].pop(key)
        if "required" in definition:
            definition["required"] = [k for k in definition["required"] if k not in owned]
    schema["$defs"].update(extra.get("$defs", {}))
    schema["properties"].update(extra["properties"])
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "Aviflow chart values"
    return _strip_titles(schema)


def _strip_titles(node: Any) -> Any:
    """Pydantic's generated titles ("Gpuquota") say nothing the key does not."""
    if isinstance(node, dict):
        return {
            k: _strip_titles(v)
            for k, v in node.items()
            if not (k == "title" and isinstance(v, str) and "properties" not in node)
        }
    if isinstance(node, list):
        return [_strip_titles(v) for v in node]
    return node


def values_reference(schema: dict[str, Any]) -> str:
    """The admins' values reference (Markdown): every key with its type, default and meaning."""
    lines = [
        "# Aviflow chart values",
        "",
        "Generated from the config model by `python -m aviflow_hub.chart helm/aviflow`; do not",
        "edit. Every object is closed: `helm install` refuses an unknown key and names it.",
        "",
        "| key | type | default | description |",
        "|---|---|---|---|",
    ]
    for path, node in _walk(schema, schema, ""):
        default = node.get("default")
        shown = "" if default is None else f"`{json.dumps(default)}`"
        description = str(node.get("description", "")).replace("|", "\\|")
        lines.append(f"| `{path}` | {_type(schema, node)} | {shown} | {description} |")
    return "\n".join(lines) + "\n"


def _resolve(root: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _walk(root: dict[str, Any], node: dict[str, Any], prefix: str) -> list[tuple[str, Any]]:
    out = []
    for key, child in _resolve(root, node).get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        target = _resolve(root, child)
        out.append((path, {**target, **{k: v for k, v in child.items() if k != "$ref"}}))
        for option in [target, *target.get("anyOf", [])]:
            option = _resolve(root, option)
            if "properties" in option:
                out.extend(_walk(root, option, path))
            elif option.get("type") == "array" and "$ref" in option.get("items", {}):
                out.extend(_walk(root, option["items"], path + "[]"))
            elif isinstance(option.get("additionalProperties"), dict) and "$ref" in option.get(
                "additionalProperties", {}
            ):  # a map of objects by name (api.kubernetes.runtimes)
                out.extend(_walk(root, option["additionalProperties"], path + ".<name>"))
    return out


def _type(root: dict[str, Any], node: dict[str, Any]) -> str:
    if "anyOf" in node:
        return " or ".join(_type(root, _resolve(root, n)) for n in node["anyOf"])
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    kind = node.get("type", "object")
    if kind == "array":
        return f"list of {_type(root, _resolve(root, node.get('items', {})))}"
    return str(kind)


def generated() -> dict[str, str]:
    """Every generated file of the chart, by path relative to the chart directory: the
    values schema and reference, and what the templates take from the pure builders (the
    TrainJob CRD, the RBAC rules, the queue-access policy), so each has one source."""
    from aviflow.k8s import policy, rbac
    from aviflow.k8s.crd import committed

    schema = values_schema()
    rules = {
        "hub": HUB_RULES,
        "controller": rbac.CONTROLLER_RULES,
        "api": rbac.API_RULES,
        "apiCluster": rbac.API_CLUSTER_RULES,
        "member": rbac.MEMBER_RULES,
        "memberJobs": rbac.MEMBER_JOB_RULES,
    }
    # the binding's namespaces are the release's: queue-policy.yaml fills them in
    queue_policy = {"policy": policy.queue_policy(), "binding": policy.queue_binding([])}
    return {
        "values.schema.json": json.dumps(schema, indent=2, sort_keys=True) + "\n",
        "VALUES.md": values_reference(schema),
        "files/trainjob-crd.yaml": committed(),
        "files/rbac.json": json.dumps(rules, indent=2) + "\n",
        "files/queue-policy.json": json.dumps(queue_policy, indent=2) + "\n",
    }


def write(chart_dir: Path) -> list[Path]:
    """Write :func:`generated` into ``chart_dir``; the paths written."""
    out = []
    for rel, text in generated().items():
        path = chart_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        out.append(path)
    return out


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "helm/aviflow")):
        print(path)
