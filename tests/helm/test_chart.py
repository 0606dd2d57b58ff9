"""The chart offline: its generated files are current, ``helm lint --strict`` passes with
the defaults and with a values file that sets everything, ``helm template`` matches the
golden files, and the schema (or, across keys, the templates) refuses bad values by name
(test_chart_values.py).

Regenerate after an intended change: ``python -m aviflow_hub.chart helm/aviflow`` and
``AVIFLOW_UPDATE_GOLDEN=1 pytest tests/helm/test_chart.py``.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow.k8s import rbac
from aviflow_hub.chart import CHART_OWNED, generated
from aviflow_hub.config import CONFIG_ENV, HubConfig
from aviflow_hub.kube_spawner import HUB_RULES
from aviflow_hub.settings import API_TOKEN_ENV, external_service_environment, hub_settings

from .conftest import CHART, EXAMPLES, TRIAL, Render, doc, hub_config_of

GOLDEN = Path(__file__).parent / "golden"
MULTI_TEAM = EXAMPLES / "multi-team.yaml"
HUB_SECTIONS = ("hub", "auth", "teams", "profiles", "storage", "culler", "api")


def test_generated_files_are_current() -> None:
    stale = [rel for rel, text in generated().items() if (CHART / rel).read_text() != text]
    assert stale == [], f"run `python -m aviflow_hub.chart helm/aviflow`; stale: {stale}"


@pytest.mark.parametrize("values", [None, MULTI_TEAM], ids=["trial", "multi-team"])
def test_lint_strict(helm: Path, values: Path | None, tmp_path: Path) -> None:
    if values is None:  # the defaults, with what a trial must add (a password)
        values = tmp_path / "trial.yaml"
        values.write_text(yaml.safe_dump(TRIAL))
    argv = [str(helm), "lint", "--strict", str(CHART), "-f", str(values)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


@pytest.mark.parametrize(
    "values", [CHART / "values.yaml", MULTI_TEAM], ids=["defaults", "multi-team"]
)
def test_the_values_are_a_hub_config(values: Path) -> None:
    """The values' hub sections load as they are with the hub's own strict loader (the chart
    adds only the keys it owns)."""
    merged = yaml.safe_load((CHART / "values.yaml").read_text())
    merged.update(yaml.safe_load(values.read_text()))
    if values == CHART / "values.yaml":  # what a trial adds: the chart has no password
        merged["auth"] = {**merged["auth"], **TRIAL["auth"]}
    cfg = HubConfig.from_dict({k: merged[k] for k in HUB_SECTIONS})
    assert [t.queue for t in cfg.teams] == [t["queue"] for t in merged["teams"]]


def readable(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rendered objects for a golden file: the hub's Secret decoded, and the generated
    tokens (aviflow-api's and the proxy's, random on each ``helm template``) replaced by what
    they are."""
    out = []
    for d in docs:
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-proxy"):
            token = base64.b64decode(d["data"]["token"]).decode()
            assert len(token) == 64 and token.isalnum(), token
            d = {**d, "data": {"token": "<generated: 64 letters and digits>"}}
        if d["kind"] == "Secret" and d["metadata"]["name"].endswith("-hub"):
            token = base64.b64decode(d["data"]["api-token"]).decode()
            assert len(token) == 64 and token.isalnum(), token
            d = {
                **d,
                "data": {
                    "api-token": "<generated: 64 letters and digits>",
                    "hub.yaml": base64.b64decode(d["data"]["hub.yaml"]).decode(),
                },
            }
        out.append(d)
    return out


@pytest.mark.parametrize("case", ["defaults", "multi-team"])
def test_template_matches_the_golden_file(render: Render, case: str) -> None:
    docs = render(*([MULTI_TEAM] if case == "multi-team" else []))
    text = yaml.safe_dump_all(readable(docs), sort_keys=True)
    golden = GOLDEN / f"{case}.yaml"
    if os.environ.get("AVIFLOW_UPDATE_GOLDEN"):
        golden.write_text(text)
    assert text == golden.read_text()


def test_teams_become_kueue_queues(render: Render) -> None:
    docs = render(MULTI_TEAM)
    kinds = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert [k for k in kinds if k[0] in ("ClusterQueue", "LocalQueue")] == [
        ("ClusterQueue", "aviflow-vision"),
        ("ClusterQueue", "aviflow-nlp"),
        ("ClusterQueue", "aviflow-prod"),
        ("LocalQueue", "vision"),
        ("LocalQueue", "nlp"),
        ("LocalQueue", "prod"),
    ]
    vision = next(
        d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "aviflow-vision"
    )
    spec = vision["spec"]
    assert (spec["cohortName"], spec["fairSharing"], spec["preemption"]) == (
        "research",
        {"weight": "2"},
        {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
    )
    [group] = spec["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory", "nvidia.com/gpu"]
    assert group["flavors"] == [
        {
            "name": "aviflow-hgx",
            "resources": [
                {"name": "cpu", "nominalQuota": "512"},
                {"name": "memory", "nominalQuota": "8Ti"},
                {
                    "name": "nvidia.com/gpu",
                    "nominalQuota": "32",
                    "borrowingLimit": "16",
                    "lendingLimit": "16",
                },
            ],
        }
    ]
    prod = next(
        d for d in docs if d["kind"] == "ClusterQueue" and d["metadata"]["name"] == "aviflow-prod"
    )
    assert "cohortName" not in prod["spec"]
    assert prod["spec"]["preemption"] == {
        "reclaimWithinCohort": "Never",
        "withinClusterQueue": "Never",
    }
    # each team's ClusterQueue admits only the Workloads of the team's own namespace, where
    # its LocalQueue is
    assert prod["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "ml-prod"}
    }
    assert [
        (d["metadata"]["namespace"], d["metadata"]["name"])
        for d in docs
        if d["kind"] == "LocalQueue"
    ] == [("aviflow-vision", "vision"), ("aviflow-nlp", "nlp"), ("ml-prod", "prod")]
    # the policy's parameters, per governed namespace: only the queue whose LocalQueue is there
    params = {
        d["metadata"]["namespace"]: d["data"]
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "aviflow-queues"
    }
    common = {
        "exempt": "system:serviceaccount:aviflow:aviflow-api,system:serviceaccount:aviflow:aviflow-controller",
        "protectedClaims": "aviflow-runs",
        "allowedImages": "registry.example.com/aviflow/trainer:0.0.9-0123456789ab,"
        "registry.example.com/aviflow/trainer:0.1.0-6045a7bbf179",
        "allowedImageNames": "torch-2-14,torch-2-15",
    }
    assert params == {
        "aviflow-notebooks": common,
        "aviflow-vision": {
            "vision": "vision,vision-leads", "priorityClasses.vision": "high,low", **common
        },
        "aviflow-nlp": {"nlp": "nlp", "priorityClasses.nlp": "", **common},
        "ml-prod": {"prod": "prod-ml", "priorityClasses.prod": "", **common},
    }  # fmt: skip
    binding = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Deny"  # fails closed
    assert binding["spec"]["matchResources"]["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": ["aviflow-nlp", "aviflow-notebooks", "aviflow-vision", "ml-prod"],
            }
        ]
    }
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "WorkloadPriorityClass"] == [
        "low",
        "normal",
        "high",
    ]


def test_a_zero_gpu_quota_stays_zero(render: Render) -> None:
    docs = render(
        values={
            "teams": [{"name": "t", "groups": ["t"], "queue": "t", "gpuQuota": 0}],
            "runStore": {"existingClaim": "runs"},
        }
    )
    [cq] = [d for d in docs if d["kind"] == "ClusterQueue"]
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "0"}


def test_the_controller_gets_the_settings_the_api_reads(render: Render) -> None:
    docs = render(MULTI_TEAM)
    settings = json.loads(
        next(
            d
            for d in docs
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "aviflow-controller"
        )["data"]["cluster.json"]
    )
    assert settings["namespace"] == "aviflow" and settings["image"] == "torch-2-15"
    assert settings["runs"] == {
        "claimName": "aviflow-runs",
        "mountPath": "/aviflow/runs",
        "localPath": "/aviflow/runs",
    }
    from aviflow.k8s.settings import ClusterSettings

    loaded = ClusterSettings.from_dict(settings)
    assert [i.name for i in loaded.trainer_images()] == ["torch-2-15", "torch-2-14"]
    # the admin's log cap reaches the controller, which gives each rank its share
    assert loaded.rank_log_cap_bytes == 32 << 30
    assert hub_config_of(docs).api.kubernetes.rank_log_cap == "32Gi"
    deploy = next(
        d
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] == "aviflow-controller"
    )
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "aviflow-controller"
    assert pod["securityContext"] == {
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    [c] = pod["containers"]
    assert c["image"] == "registry.example.com/aviflow/trainer:0.1.0-6045a7bbf179"
    assert c["command"] == [
        "python",
        "-m",
        "aviflow.operator",
        "--settings",
        "/etc/aviflow/cluster.json",
        "--lease",
        "aviflow-controller",
        "--health-host",
        "$(POD_IP)",
        "--health-port",
        "8090",
    ]
    # two candidates, one leader on the release's Lease, which the controller alone may hold
    assert deploy["spec"]["replicas"] == 2
    assert c["env"] == [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    lease_role = doc(docs, "Role", "aviflow-controller-lease")
    assert lease_role["metadata"]["namespace"] == "aviflow"
    assert lease_role["rules"] == rbac.leader_rules("aviflow-controller")
    binding = doc(docs, "RoleBinding", "aviflow-controller-lease")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "aviflow-controller", "namespace": "aviflow"}
    ]


def test_chart_owned_keys_are_not_in_the_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert not set(CHART_OWNED["HubSection"]) & set(values["hub"])
    assert not set(CHART_OWNED["ApiSection"]) & set(values["api"])


def test_the_hub_and_aviflow_api_load_the_config_the_chart_renders(render: Render) -> None:
    """The Secret's hub.yaml is the values' hub sections plus what the chart owns, and loads
    with the hub's strict loader; aviflow-api reads the same cluster settings as the
    controller."""
    docs = render(MULTI_TEAM)
    cfg = hub_config_of(docs)
    values = yaml.safe_load(MULTI_TEAM.read_text())
    assert [t.model_dump(by_alias=True, exclude_unset=True) for t in cfg.teams] == values["teams"]
    # notebooks in their own namespace reach the hub and aviflow-api by their full names
    assert (cfg.hub.spawner, cfg.hub.namespace, cfg.hub.notebook_bind) == (
        "kubernetes",
        "aviflow-notebooks",
        "podIP",
    )
    assert (cfg.hub.hub_connect_url, cfg.hub.data_dir) == (
        "http://aviflow-hub.aviflow.svc:8081",
        "/srv/jupyterhub",
    )
    assert (cfg.api.external, cfg.api.backend, cfg.api_url, cfg.api.run_root) == (
        True,
        "kubernetes",
        "http://aviflow-api.aviflow.svc:8088",
        "/aviflow/runs",
    )
    assert cfg.api.kubernetes.queue_namespaces == {
        "vision": "aviflow-vision",
        "nlp": "aviflow-nlp",
        "prod": "ml-prod",
    }
    controller = json.loads(doc(docs, "ConfigMap", "aviflow-controller")["data"]["cluster.json"])
    assert cfg.api.kubernetes.model_dump(by_alias=True, exclude_unset=True) == controller
    # the hub registers aviflow-api with the token (it does not start it) ...
    settings = hub_settings(cfg, Path("/etc/aviflow/hub.yaml"), api_token="t" * 64)
    [api] = [s for s in settings["JupyterHub"]["services"] if s["name"] == "aviflow-api"]
    assert (api["api_token"], api["url"], "command" in api) == ("t" * 64, cfg.api_url, False)
    assert settings["KubeSpawner"]["automount_service_account_token"] is False
    # ... and refuses to start without it, saying where it comes from
    with pytest.raises(ValueError, match=r"needs its token in \$AVIFLOW_API_TOKEN"):
        hub_settings(cfg, Path("/etc/aviflow/hub.yaml"))


def test_hub_and_api_pods_share_the_token_and_have_their_own_identities(render: Render) -> None:
    docs = render()
    hub = doc(docs, "Deployment", "aviflow-hub")["spec"]["template"]["spec"]
    api = doc(docs, "Deployment", "aviflow-api")["spec"]["template"]["spec"]
    token_ref = {"secretKeyRef": {"name": "aviflow-hub", "key": "api-token"}}
    [hub_c], [api_c] = hub["containers"], api["containers"]
    hub_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in hub_c["env"]}
    api_env = {e["name"]: e.get("value", e.get("valueFrom")) for e in api_c["env"]}
    assert hub_env[API_TOKEN_ENV] == token_ref and api_env.pop("JUPYTERHUB_API_TOKEN") == token_ref
    # the hub reads the config the Secret mounts (aviflow-api is told with --config)
    assert (
        hub_env[CONFIG_ENV] == "/etc/aviflow/hub.yaml"
        and api_c["command"][-1] == hub_env[CONFIG_ENV]
    )
    # aviflow-api gets what the hub gives a service it starts itself
    assert api_env == external_service_environment(
        hub_config_of(docs), "http://aviflow-hub.aviflow.svc:8081", "http://0.0.0.0:8088"
    )
    # the hub's API on every address of the pod; the proxy runs apart, and the hub holds its
    # API token (the proxy's Secret), not the other way round
    assert hub_c["command"][3:] == ["--JupyterHub.hub_bind_url=http://:8081"]
    assert hub_config_of(docs).hub.proxy_url == "http://aviflow-proxy-api.aviflow.svc:8001"
    proxy_token = {"secretKeyRef": {"name": "aviflow-proxy", "key": "token"}}
    assert hub_env["CONFIGPROXY_AUTH_TOKEN"] == proxy_token
    proxy = doc(docs, "Deployment", "aviflow-proxy")["spec"]["template"]["spec"]
    [proxy_c] = proxy["containers"]
    assert proxy_c["env"] == [{"name": "CONFIGPROXY_AUTH_TOKEN", "valueFrom": proxy_token}]
    assert proxy_c["command"] == [
        "configurable-http-proxy",
        "--ip=0.0.0.0",
        "--port=8000",
        "--api-ip=0.0.0.0",
        "--api-port=8001",
        "--default-target=http://aviflow-hub.aviflow.svc:8081",
        "--error-target=http://aviflow-hub.aviflow.svc:8081/hub/error",
    ]
    # no service-account token, no volume: nothing of the hub's
    assert (proxy["serviceAccountName"], proxy["automountServiceAccountToken"]) == (
        "aviflow-proxy",
        False,
    )
    assert "volumes" not in proxy and proxy_c["securityContext"]["readOnlyRootFilesystem"]
    assert (hub_c["image"], api_c["image"]) == ("localhost/aviflow/hub:0.1.0",) * 2
    # each its own service account and least-privilege rules
    assert (hub["serviceAccountName"], api["serviceAccountName"]) == ("aviflow-hub", "aviflow-api")
    assert doc(docs, "Role", "aviflow-hub")["rules"] == HUB_RULES
    assert doc(docs, "Role", "aviflow-api")["rules"] == rbac.API_RULES
    assert doc(docs, "ClusterRole", "aviflow-api")["rules"] == rbac.API_CLUSTER_RULES
    assert doc(docs, "ClusterRole", "aviflow-controller")["rules"] == (
        rbac.CONTROLLER_CLUSTER_RULES
    )
    for pod in (hub, api):
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    # a config change rolls both pods (not the proxy's); the generated token is not part of it
    checksums = {
        d["metadata"]["name"]: d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
        for d in docs
        if d["kind"] == "Deployment" and d["metadata"]["name"] in ("aviflow-hub", "aviflow-api")
    }
    assert checksums["aviflow-hub"] == checksums["aviflow-api"]
    quota = render(
        values={
            "teams": [{"name": "t", "groups": ["t"], "queue": "t", "gpuQuota": 4}],
            "runStore": {"existingClaim": "runs"},
        }
    )
    assert (
        doc(quota, "Deployment", "aviflow-hub")["spec"]["template"]["metadata"]["annotations"]
        != doc(docs, "Deployment", "aviflow-hub")["spec"]["template"]["metadata"]["annotations"]
    )
    assert (
        doc(quota, "Deployment", "aviflow-proxy")["spec"]["template"]
        == doc(docs, "Deployment", "aviflow-proxy")["spec"]["template"]
    )
    assert doc(docs, "Service", "aviflow-proxy-public")["spec"]["type"] == "LoadBalancer"


def test_the_control_plane_asks_for_what_it_uses_and_is_probed(render: Render) -> None:
    """Every container of the control plane has the values' requests and memory limit
    (Burstable, never BestEffort); the hub, the proxy and the controller are restarted when
    their health endpoints stop answering; no pod chowns its volumes again at every start."""
    docs = render(values={"resources": {"api": {"requests": {"cpu": "2"}, "limits": {}}}})
    pods = {
        name: doc(docs, "Deployment", f"aviflow-{name}")["spec"]["template"]["spec"]
        for name in ("hub", "proxy", "api", "controller")
    }
    resources = {name: pod["containers"][0]["resources"] for name, pod in pods.items()}
    assert resources == {
        "hub": {"requests": {"cpu": "200m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "proxy": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
        # the admin's, merged key by key into the defaults (Helm's values; null removes one)
        "api": {"requests": {"cpu": "2", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
        "controller": {
            "requests": {"cpu": "200m", "memory": "256Mi"},
            "limits": {"memory": "1Gi"},
        },
    }
    probes = {
        name: pod["containers"][0]["livenessProbe"]
        for name, pod in pods.items()
        if "livenessProbe" in pod["containers"][0]
    }
    assert probes["hub"]["httpGet"] == {"path": "/hub/health", "port": "hub"}
    assert probes["proxy"]["httpGet"] == {"path": "/_chp_healthz", "port": "http", "scheme": "HTTP"}
    assert probes["api"] == {
        "tcpSocket": {"port": "http"},
        "initialDelaySeconds": 30,
        "periodSeconds": 10,
        "failureThreshold": 6,
    }
    # the controller's: a hung reconcile would not lose it the Lease, the probe restarts it
    assert probes["controller"]["httpGet"] == {"path": "/healthz", "port": "health"}
    controller = pods["controller"]["containers"][0]
    # ready once it serves /healthz (a replica waiting for the Lease too): a rollout waits
    assert controller["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert controller["command"][-4:] == ["--health-host", "$(POD_IP)", "--health-port", "8090"]
    assert controller["ports"] == [{"name": "health", "containerPort": 8090}]
    assert controller["env"][1] == {
        "name": "POD_IP",
        "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}},
    }
    assert sorted(probes) == ["api", "controller", "hub", "proxy"]
    assert {
        name: pod["securityContext"].get("fsGroupChangePolicy") for name, pod in pods.items()
    } == {
        "hub": "OnRootMismatch",
        "proxy": "OnRootMismatch",
        "api": "OnRootMismatch",
        "controller": "OnRootMismatch",
    }


def test_the_ledger_claim_only_without_a_database(render: Render) -> None:
    own = render()
    assert doc(own, "PersistentVolumeClaim", "aviflow-api-db")["metadata"]["annotations"] == {
        "helm.sh/resource-policy": "keep"
    }
    pg = render(values={"api": {"database": "postgresql://aviflow@db/aviflow"}})
    assert [d for d in pg if d["metadata"]["name"] == "aviflow-api-db"] == []
    volumes = doc(pg, "Deployment", "aviflow-api")["spec"]["template"]["spec"]["volumes"]
    assert next(v for v in volumes if v["name"] == "db") == {"name": "db", "emptyDir": {}}


def notes(helm: Path, tmp_path: Path, values: dict[str, Any]) -> str:
    """What ``helm install`` prints after installing (NOTES.txt), without a cluster."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({**TRIAL, **values}))
    argv = [str(helm), "install", "av", str(CHART), "-n", "ml", "--dry-run=client", "-f", str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split("NOTES:\n", 1)[1]


def test_the_install_notes_say_where_to_log_in_and_what_is_missing(
    helm: Path, tmp_path: Path
) -> None:
    teams = [
        {"name": "vision", "groups": ["vision"], "queue": "vq", "gpuQuota": 0, "cohort": "hgx"},
        {"name": "nlp", "groups": ["nlp"], "queue": "nq"},
    ]
    text = notes(
        helm,
        tmp_path,
        {"teams": teams, "proxy": {"port": 8443}, "runStore": {"existingClaim": "runs"}},
    )
    assert "kubectl -n ml get svc av-proxy-public    # EXTERNAL-IP, port 8443" in text
    assert "kubectl -n ml port-forward svc/av-proxy-public 8080:8443" in text
    assert (
        "  vision: queue vq, 0 GPUs, cohort hgx, namespace av-vision\n"
        "  nlp: queue nq, 8 GPUs, namespace av-nlp\n"
    ) in text
    assert "Notebooks run in namespace av-notebooks." in text
    assert 'WARNING: auth.type is "dev"' in text
    assert "No teams yet" not in text
    empty = notes(helm, tmp_path, {})
    assert "No teams yet, so nobody can submit a job" in empty
