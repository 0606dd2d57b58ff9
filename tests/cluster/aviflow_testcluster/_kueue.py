"""Kueue's manifests, read from the pinned module and adapted to a loopback webhook.

In a real cluster Kueue's webhooks and CRD conversion are reached through the
Service ``kueue-webhook-service.kueue-system``. Here Kueue runs as a local
process, so every ``clientConfig.service`` becomes ``clientConfig.url:
https://127.0.0.1:<port><path>`` with our CA bundle (the webhook certificate has
an IP SAN for 127.0.0.1). Everything else (names, rules, failure policies, the
namespace selectors from Kueue's kustomization) is kept as upstream ships it.

Kueue's visibility API (``visibility.kueue.x-k8s.io``) is an aggregated API: the
API server proxies it to Kueue's visibility server through an APIService that
names the Service ``visibility-server.kueue-system``. There is no ClusterIP
routing here, so that Service becomes ``type: ExternalName`` with
``externalName: localhost``: the aggregator's default (ClusterIP) service
resolver turns an ExternalName Service into ``https://<externalName>:<APIService
port>`` (``k8s.io/apiserver pkg/util/proxy/proxy.go`` ``ResolveCluster``), and its
availability check skips the endpoint lookup for it. The APIService carries the
cluster's port and our CA bundle instead of ``insecureSkipTLSVerify``.
"""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

NAMESPACE = "kueue-system"
WEBHOOK_PREFIX = "kueue-"
VISIBILITY_SERVICE_HOST = "localhost"


def _docs(path: Path) -> list[dict]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _url_client_config(path: str, port: int, ca_pem: bytes) -> dict:
    return {
        "url": f"https://127.0.0.1:{port}{path}",
        "caBundle": base64.b64encode(ca_pem).decode(),
    }


def crds(src: Path, port: int, ca_pem: bytes) -> list[dict]:
    """Kueue CRDs as kustomize would build them (conversion webhook patches applied)."""
    kust = yaml.safe_load((src / "config/components/crd/kustomization.yaml").read_text())
    patched: dict[str, dict] = {}
    for p in kust.get("patches", []):
        doc = yaml.safe_load((src / "config/components/crd" / p["path"]).read_text())
        patched[doc["metadata"]["name"]] = doc["spec"]["conversion"]
    out = []
    for res in kust["resources"]:
        crd = yaml.safe_load((src / "config/components/crd" / res).read_text())
        conv = patched.get(crd["metadata"]["name"])
        if conv is not None:
            conv = dict(conv)
            webhook = dict(conv["webhook"])
            webhook["clientConfig"] = _url_client_config(
                webhook["clientConfig"]["service"]["path"], port, ca_pem
            )
            conv["webhook"] = webhook
            crd["spec"]["conversion"] = conv
        out.append(crd)
    return out


def webhook_configurations(src: Path, port: int, ca_pem: bytes) -> list[dict]:
    """Kueue's Mutating/ValidatingWebhookConfigurations pointing at 127.0.0.1:port."""
    base = src / "config/components/webhook"
    configs = _docs(base / "manifests.yaml")
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    selectors: dict[tuple[str, str], dict] = {}
    for p in kust.get("patches", []):
        doc = yaml.safe_load(p["patch"])
        for wh in doc.get("webhooks", []):
            if "namespaceSelector" in wh:
                selectors[(doc["kind"], wh["name"])] = wh["namespaceSelector"]
    for cfg in configs:
        cfg["metadata"]["name"] = WEBHOOK_PREFIX + cfg["metadata"]["name"]
        for wh in cfg["webhooks"]:
            wh["clientConfig"] = _url_client_config(
                wh["clientConfig"]["service"]["path"], port, ca_pem
            )
            sel = selectors.get((cfg["kind"], wh["name"]))
            if sel is not None:
                wh["namespaceSelector"] = sel
    return configs


def visibility_objects(src: Path, port: int, ca_pem: bytes) -> list[dict]:
    """Kueue's visibility component (APIServices, Service, RoleBinding) for loopback.

    Read from ``config/components/visibility`` as its kustomization lists it; the
    RoleBinding's subject gets the ``kueue-`` prefix its transformer adds.
    """
    base = src / "config/components/visibility"
    kust = yaml.safe_load((base / "kustomization.yaml").read_text())
    out = []
    for res in kust["resources"]:
        for doc in _docs(base / res):
            kind = doc["kind"]
            if kind == "APIService":
                spec = doc["spec"]
                spec.pop("insecureSkipTLSVerify", None)
                spec["caBundle"] = base64.b64encode(ca_pem).decode()
                spec["service"] = {**spec["service"], "port": port}
            elif kind == "Service":
                doc["spec"] = {"type": "ExternalName", "externalName": VISIBILITY_SERVICE_HOST}
            elif kind == "RoleBinding":
                for subj in doc.get("subjects", []):
                    subj["name"] = WEBHOOK_PREFIX + subj["name"]
                    subj["namespace"] = WEBHOOK_PREFIX + subj["namespace"]
            out.append(doc)
    return out


def configuration(
    *,
    webhook_port: int,
    health_port: int,
    visibility_port: int,
    cert_dir: Path,
    frameworks: list[str],
) -> dict:
    """Kueue's Configuration for an out-of-cluster run on loopback."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(cert_dir)},
        "visibilityServer": {"bindAddress": "127.0.0.1", "bindPort": visibility_port},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 100, "burst": 200},
        "integrations": {"frameworks": list(frameworks)},
    }
