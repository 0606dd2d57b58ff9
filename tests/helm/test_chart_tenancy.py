"""The chart's tenancy, rendered offline: namespaces by trust (the control plane apart from
notebooks and each team's jobs), the run store in each, kubectl members bound in their team's
namespace, NetworkPolicies, TLS at the proxy or an Ingress, and the only images a pod may
run. What the API server does with them is in ``test_install.py``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow.k8s import rbac
from aviflow_hub.profiles import profile_entry
from aviflow_hub.settings import hub_settings

from .conftest import EXAMPLES, Render, doc, hub_config_of

MULTI_TEAM = EXAMPLES / "multi-team.yaml"
OAUTH = yaml.safe_load(MULTI_TEAM.read_text())["auth"]["genericOAuth"] | {"allowedGroups": []}


def test_network_policies(render: Render) -> None:
    docs = render()
    nb = doc(docs, "NetworkPolicy", "aviflow-notebooks")["spec"]
    assert nb["podSelector"] == {
        "matchLabels": {"component": "singleuser-server", "app.kubernetes.io/part-of": "aviflow"}
    }
    hub = {"app.kubernetes.io/component": "hub", "app.kubernetes.io/instance": "aviflow"}
    api = {"app.kubernetes.io/component": "api", "app.kubernetes.io/instance": "aviflow"}
    proxy = {"app.kubernetes.io/component": "proxy", "app.kubernetes.io/instance": "aviflow"}
    release = {"matchLabels": {"kubernetes.io/metadata.name": "aviflow"}}
    # in: only from the proxy and the hub (in the release's namespace), on the notebook port
    assert nb["ingress"] == [
        {
            "from": [
                {"namespaceSelector": release, "podSelector": {"matchLabels": proxy}},
                {"namespaceSelector": release, "podSelector": {"matchLabels": hub}},
            ],
            "ports": [{"protocol": "TCP", "port": 8888}],
        }
    ]
    # the proxy's public port for everyone, its API (the routes) for the hub only
    assert doc(docs, "NetworkPolicy", "aviflow-proxy")["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8000}]},
        {
            "from": [{"podSelector": {"matchLabels": hub}}],
            "ports": [{"protocol": "TCP", "port": 8001}],
        },
    ]
    # the hub's API for the proxy, notebooks and aviflow-api; nothing else
    assert [
        (rule["from"], rule["ports"])
        for rule in doc(docs, "NetworkPolicy", "aviflow-hub")["spec"]["ingress"]
    ] == [
        (
            [
                {"podSelector": {"matchLabels": proxy}},
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "aviflow-notebooks"}
                    },
                    "podSelector": nb["podSelector"],
                },
                {"podSelector": {"matchLabels": api}},
            ],
            [{"protocol": "TCP", "port": 8081}],
        )
    ]
    # out: the hub's API, aviflow-api, DNS, and public addresses only: no Kubernetes API and
    # no other pod (cluster addresses are private)
    to = [(rule["to"][0], rule.get("ports")) for rule in nb["egress"]]
    assert to[:2] == [
        (
            {"namespaceSelector": release, "podSelector": {"matchLabels": hub}},
            [{"protocol": "TCP", "port": 8081}],
        ),
        (
            {"namespaceSelector": release, "podSelector": {"matchLabels": api}},
            [{"protocol": "TCP", "port": 8088}],
        ),
    ]
    assert to[3] == (
        {
            "ipBlock": {
                "cidr": "0.0.0.0/0",
                "except": [
                    "10.0.0.0/8",
                    "172.16.0.0/12",
                    "192.168.0.0/16",
                    "169.254.0.0/16",
                    "100.64.0.0/10",
                ],
            }
        },
        None,
    )
    names = [
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in docs
        if d["kind"] == "NetworkPolicy"
    ]
    assert names == [
        ("aviflow-notebooks", "aviflow-notebooks"),
        ("aviflow", "aviflow-hub"),
        ("aviflow", "aviflow-proxy"),
        ("aviflow", "aviflow-api"),
        ("aviflow", "aviflow-controller"),
        ("aviflow", "aviflow-trainers"),  # no teams: no team namespaces
    ]
    teams = render(MULTI_TEAM)
    assert [
        d["metadata"]["namespace"]
        for d in teams
        if d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "aviflow-trainers"
    ] == ["aviflow-vision", "aviflow-nlp", "ml-prod"]
    assert [
        d for d in render(values={"networkPolicy": False}) if d["kind"] == "NetworkPolicy"
    ] == []


def test_the_users_address_over_tls_at_the_proxy_or_an_ingress(render: Render) -> None:
    """``proxy.https``: the proxy serves HTTPS with the TLS Secret's certificate (mounted in
    the proxy's pod only); ``ingress``: an Ingress of the admin's class in front of the
    proxy's Service. The dev login on ClusterIP needs no permission."""
    docs = render(
        values={
            "auth": {"dev": {"allowOnPublicAddress": False}},
            "proxy": {
                "type": "ClusterIP",
                "port": 443,
                "https": {"enabled": True, "secret": "hub-tls"},
            },
        }
    )
    pod = doc(docs, "Deployment", "aviflow-proxy")["spec"]["template"]["spec"]
    [c] = pod["containers"]
    assert c["command"][-2:] == [
        "--ssl-cert=/etc/aviflow-tls/tls.crt",
        "--ssl-key=/etc/aviflow-tls/tls.key",
    ]
    assert c["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert c["volumeMounts"] == [{"name": "tls", "mountPath": "/etc/aviflow-tls", "readOnly": True}]
    assert pod["volumes"] == [{"name": "tls", "secret": {"secretName": "hub-tls"}}]
    hub = doc(docs, "Deployment", "aviflow-hub")["spec"]["template"]["spec"]
    assert [v["name"] for v in hub["volumes"]] == ["config", "db", "tmp"]  # no certificate
    [svc] = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-public")
    ]
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "targetPort": "http"}]
    assert svc["spec"]["selector"]["app.kubernetes.io/component"] == "proxy"
    assert not [d for d in docs if d["kind"] == "Ingress"]
    docs = render(
        values={
            "auth": {"type": "generic-oauth", "genericOAuth": {**OAUTH, "allowedGroups": ["ml"]}},
            "proxy": {"type": "ClusterIP"},
            "ingress": {
                "enabled": True,
                "className": "nginx",
                "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
                "hosts": ["aviflow.example.com"],
                "tls": [{"secretName": "aviflow-tls", "hosts": ["aviflow.example.com"]}],
            },
        }
    )
    [ingress] = [d for d in docs if d["kind"] == "Ingress"]
    backend = {"service": {"name": "aviflow-proxy-public", "port": {"name": "http"}}}
    assert ingress["spec"] == {
        "ingressClassName": "nginx",
        "rules": [
            {
                "host": "aviflow.example.com",
                "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]},
            }
        ],
        "tls": [{"secretName": "aviflow-tls", "hosts": ["aviflow.example.com"]}],
    }
    assert ingress["metadata"]["annotations"] == {"cert-manager.io/cluster-issuer": "letsencrypt"}
    # the hub lets in the groups named (and the admins' groups), nobody else
    settings = hub_settings(hub_config_of(docs), Path("/etc/aviflow/hub.yaml"), api_token="t" * 64)
    oauth = settings["GenericOAuthenticator"]
    assert (oauth["allowed_groups"], oauth["username_claim"], "allow_all" in oauth) == (
        {"ml"},
        "sub",
        False,
    )


def test_the_only_images_a_pod_may_run_are_the_admins(render: Render) -> None:
    """Without a trainer image list, jobs run in the chart's own trainer image (pinned by
    digest when the values give one), and the policy allows that image alone; notebook
    profiles without an image get hub.notebookImage."""
    digest = "sha256:" + "ab" * 32
    docs = render(
        values={
            "images": {"controller": {"repository": "reg/trainer", "tag": "1", "digest": digest}}
        }
    )
    settings = json.loads(
        next(d for d in docs if d["metadata"]["name"] == "aviflow-controller" and
             d["kind"] == "ConfigMap")["data"]["cluster.json"]
    )  # fmt: skip
    assert (settings["image"], settings["images"]) == (f"reg/trainer:1@{digest}", [])
    params = next(d for d in docs if d["metadata"]["name"] == "aviflow-queues")["data"]
    assert (params["allowedImages"], params["allowedImageNames"]) == (
        f"reg/trainer:1@{digest}",
        "default",
    )
    deploy = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "aviflow-controller"
    )
    assert deploy["spec"]["template"]["spec"]["containers"][0]["image"] == f"reg/trainer:1@{digest}"
    cfg = hub_config_of(docs)
    kube = hub_settings(cfg, Path("/etc/aviflow/hub.yaml"), api_token="t" * 64)["KubeSpawner"]
    assert kube["image"] == "localhost/aviflow/notebook:0.1.0"
    [small] = cfg.profiles
    assert small.image is None and "image" not in profile_entry(small)["kubespawner_override"]


def test_namespaces_by_trust(render: Render) -> None:
    """Users' notebooks and each team's jobs in namespaces of their own, enforcing Pod
    Security ``restricted``; the run store reaches each through its own volume and claim;
    team members' kubectl is bound in their team's namespace only."""
    docs = render(MULTI_TEAM)
    spaces = {
        d["metadata"]["name"]: d["metadata"]["labels"] for d in docs if d["kind"] == "Namespace"
    }
    assert sorted(spaces) == ["aviflow-nlp", "aviflow-notebooks", "aviflow-vision", "ml-prod"]
    for labels in spaces.values():
        assert labels["pod-security.kubernetes.io/enforce"] == "restricted"
    assert spaces["ml-prod"]["aviflow.dev/team"] == "prod"
    # no control-plane account, Secret or Deployment outside the release's namespace
    for d in docs:
        if d["kind"] in ("ServiceAccount", "Secret", "Deployment", "Service"):
            assert d["metadata"]["namespace"] == "aviflow", d["metadata"]
    # the run store: one Retain volume and claim per namespace that mounts it, bound together
    claims = {
        d["metadata"]["namespace"]: d["spec"]["volumeName"]
        for d in docs
        if d["kind"] == "PersistentVolumeClaim" and d["metadata"]["name"] == "aviflow-runs"
    }
    assert claims == {
        ns: f"aviflow-runs-{ns}" for ns in ("aviflow", "aviflow-vision", "aviflow-nlp", "ml-prod")
    }
    pv = doc(docs, "PersistentVolume", "aviflow-runs-ml-prod")["spec"]
    assert (pv["nfs"], pv["claimRef"], pv["persistentVolumeReclaimPolicy"]) == (
        {"server": "10.20.0.5", "path": "/exports/aviflow-runs"},
        {"namespace": "ml-prod", "name": "aviflow-runs"},
        "Retain",
    )
    # the controller and aviflow-api act in each team's namespace; the hub in the notebooks';
    # the controller's Lease in the release's
    roles = sorted(
        (d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Role"
    )
    assert roles == sorted(
        [("aviflow-notebooks", "aviflow-hub"), ("aviflow", "aviflow-controller-lease")]
        + [
            (ns, f"aviflow-{who}")
            for ns in ("aviflow-vision", "aviflow-nlp", "ml-prod")
            for who in ("api", "controller", "member")
        ]
    )
    member = next(
        d
        for d in docs
        if d["kind"] == "RoleBinding"
        and d["metadata"]["name"] == "aviflow-member"
        and d["metadata"]["namespace"] == "aviflow-vision"
    )
    assert [s["name"] for s in member["subjects"]] == ["vision", "vision-leads"]
    vision_role = next(
        d
        for d in docs
        if d["kind"] == "Role"
        and d["metadata"]["name"] == "aviflow-member"
        and d["metadata"]["namespace"] == "aviflow-vision"
    )
    assert vision_role["rules"] == rbac.MEMBER_RULES + rbac.MEMBER_JOB_RULES


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (
            {"teams": [{"name": "t", "groups": ["t"], "queue": "t"}]},
            "runStore: the teams' jobs run in their own namespaces",
        ),
        (
            {
                "teams": [{"name": "t", "groups": ["t"], "queue": "t", "namespace": "aviflow"}],
                "runStore": {"existingClaim": "runs"},
            },
            "teams[t]: namespace aviflow is already the release's namespace",
        ),
        (
            {
                "teams": [
                    {"name": "a", "groups": ["a"], "queue": "a", "namespace": "shared"},
                    {"name": "b", "groups": ["b"], "queue": "b", "namespace": "shared"},
                ],
                "runStore": {"existingClaim": "runs"},
            },
            "teams[b]: namespace shared is already team a's namespace",
        ),
        (
            {"namespaces": {"notebooks": "aviflow"}},
            "namespaces.notebooks: aviflow is the release's namespace",
        ),
    ],
)
def test_namespaces_apart_or_a_clear_refusal(
    render: Render, values: dict[str, Any], message: str
) -> None:
    proc = render(values=values, check=False)
    assert proc.returncode != 0 and message in proc.stderr, proc.stderr
