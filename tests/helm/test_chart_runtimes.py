"""Training runtimes in the chart (``api.kubernetes.runtimes``): the examples reach the hub
and the controller as settings that load, the teams' namespaces enforce ``podSecurity``, and
values that could not work are refused by name (`helm template`; no cluster)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aviflow.k8s.runtimes import CAPABILITY_LEVEL
from aviflow.k8s.settings import ClusterSettings

from .conftest import EXAMPLES, Render, doc, hub_config_of

MULTI_TEAM = EXAMPLES / "multi-team.yaml"
INFINIBAND = EXAMPLES / "infiniband.yaml"
ENFORCE = "pod-security.kubernetes.io/enforce"


def team_levels(docs: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Each team namespace's enforced and warned Pod Security level."""
    return {
        d["metadata"]["name"]: (
            d["metadata"]["labels"][ENFORCE],
            d["metadata"]["labels"]["pod-security.kubernetes.io/warn"],
        )
        for d in docs
        if d["kind"] == "Namespace" and d["metadata"]["labels"].get("aviflow.dev/role") == "team"
    }


def test_the_examples_runtimes_reach_the_hub_and_the_controller(render: Render) -> None:
    docs = render(MULTI_TEAM)
    settings = hub_config_of(docs).api.kubernetes
    assert settings.default_runtime == "hf-cache" and sorted(settings.runtimes) == ["hf-cache"]
    assert set(team_levels(docs).values()) == {("restricted", "restricted")}
    docs = render(MULTI_TEAM, INFINIBAND)
    settings = hub_config_of(docs).api.kubernetes
    assert sorted(settings.runtimes) == ["hf-cache", "infiniband"]
    ib = settings.runtimes["infiniband"]
    assert (ib.resources, ib.capabilities, ib.pod_security()) == (
        {"rdma/hca_shared_devices_a": 1},
        ["IPC_LOCK"],
        "privileged",
    )
    # the teams' namespaces let the controller's pods have it; warnings stay at restricted
    assert team_levels(docs) == {
        "aviflow-vision": ("privileged", "restricted"),
        "aviflow-nlp": ("privileged", "restricted"),
        "ml-prod": ("privileged", "restricted"),
    }
    notebooks = doc(docs, "Namespace", "aviflow-notebooks")  # users' notebooks: as they were
    assert notebooks["metadata"]["labels"][ENFORCE] == "restricted"
    controller = doc(docs, "ConfigMap", "aviflow-controller")
    cluster = ClusterSettings.from_dict(json.loads(controller["data"]["cluster.json"]))
    assert cluster.runtimes == settings.runtimes and cluster.pod_security == "privileged"


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "a capability off the list",
        {"api": {"kubernetes": {"runtimes": {"ib": {"capabilities": ["SYS_ADMIN"]}}}}},
        "at '/api/kubernetes/runtimes/ib/capabilities/0': value must be one of",
    ),
    (
        "a resource without a domain",
        {"api": {"kubernetes": {"runtimes": {"ib": {"resources": {"memory": 1}}}}}},
        # (helm names a wrong location for a bad property name, so the name is what is checked)
        "invalid propertyName 'memory'",
    ),
    (
        "a bad variable name",
        {"api": {"kubernetes": {"runtimes": {"ib": {"env": {"NCCL-DEBUG": "1"}}}}}},
        "invalid propertyName 'NCCL-DEBUG'",
    ),
    (
        "a typo in a runtime",
        {"api": {"kubernetes": {"runtimes": {"ib": {"hostNetwrk": True}}}}},
        "at '/api/kubernetes/runtimes/ib': additional properties 'hostNetwrk' not allowed",
    ),
    (
        "hostNetwork under restricted",
        {"api": {"kubernetes": {"runtimes": {"ib": {"hostNetwork": True}}}}},
        "api.kubernetes.runtimes.ib: hostNetwork and capabilities other than NET_BIND_SERVICE "
        "need Pod Security privileged, and the teams' namespaces enforce restricted "
        "(api.kubernetes.podSecurity): their pods would never be created. Set "
        "api.kubernetes.podSecurity: privileged, or drop them from the runtime",
    ),
    (
        "privileged teams with kubectl users' own Jobs",
        {"api": {"kubernetes": {"podSecurity": "privileged"}}},
        "api.kubernetes.podSecurity privileged with kubectlAccess.jobs: team members' own "
        "Jobs would run with what Pod Security privileged allows (root, any capability); keep "
        "podSecurity restricted, or turn kubectlAccess.jobs off",
    ),
]


@pytest.mark.parametrize(("values", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_runtimes_that_cannot_work_are_refused_by_name(
    render: Render, values: dict[str, Any], message: str
) -> None:
    proc = render(MULTI_TEAM, values=values, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert message in proc.stderr, proc.stderr


@pytest.mark.parametrize("capability", sorted(CAPABILITY_LEVEL))
def test_the_chart_and_the_settings_agree_on_what_restricted_allows(
    render: Render, capability: str
) -> None:
    """The chart's check mirrors the settings' (which the hub and the controller run
    again): a capability passes a restricted render exactly when the settings load it."""
    runtime = {"runtimes": {"rt": {"capabilities": [capability]}}}
    proc = render(values={"api": {"kubernetes": runtime}}, check=False)
    try:
        ClusterSettings.from_dict(runtime)
        loads = True
    except Exception:
        loads = False
    assert (proc.returncode == 0) is loads is (CAPABILITY_LEVEL[capability] == "restricted")
