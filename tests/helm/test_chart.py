"""The chart offline: its generated files are current, ``helm lint --strict`` passes with
the defaults and with a values file that sets everything, ``helm template`` matches the
golden files, and the schema (or, across keys, the templates) refuses bad values by name.

Regenerate after an intended change: ``python -m aviflow_hub.chart helm/aviflow`` and
``AVIFLOW_UPDATE_GOLDEN=1 pytest tests/helm/test_chart.py``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow_hub.chart import CHART_OWNED, generated
from aviflow_hub.config import HubConfig

from .conftest import CHART, EXAMPLES, Render

GOLDEN = Path(__file__).parent / "golden"
MULTI_TEAM = EXAMPLES / "multi-team.yaml"
HUB_SECTIONS = ("hub", "auth", "teams", "profiles", "storage", "culler", "api")


def test_generated_files_are_current() -> None:
    stale = [rel for rel, text in generated().items() if (CHART / rel).read_text() != text]
    assert stale == [], f"run `python -m aviflow_hub.chart helm/aviflow`; stale: {stale}"


@pytest.mark.parametrize("values", [None, MULTI_TEAM], ids=["defaults", "multi-team"])
def test_lint_strict(helm: Path, values: Path | None) -> None:
    argv = [str(helm), "lint", "--strict", str(CHART)]
    if values is not None:
        argv += ["-f", str(values)]
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
    cfg = HubConfig.from_dict({k: merged[k] for k in HUB_SECTIONS})
    assert [t.queue for t in cfg.teams] == [t["queue"] for t in merged["teams"]]


@pytest.mark.parametrize("case", ["defaults", "multi-team"])
def test_template_matches_the_golden_file(render: Render, case: str) -> None:
    docs = render(*([MULTI_TEAM] if case == "multi-team" else []))
    text = yaml.safe_dump_all(docs, sort_keys=True)
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
    assert prod["spec"]["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "aviflow"}
    }
    params = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "aviflow-queues"
    )
    assert params["data"] == {
        "vision": "vision,vision-leads",
        "nlp": "nlp",
        "prod": "prod-ml",
        "exempt": "system:serviceaccount:aviflow:aviflow-api,system:serviceaccount:aviflow:aviflow-controller",
    }
    assert [d["metadata"]["name"] for d in docs if d["kind"] == "WorkloadPriorityClass"] == [
        "low",
        "normal",
        "high",
    ]


def test_a_zero_gpu_quota_stays_zero(render: Render) -> None:
    docs = render(values={"teams": [{"name": "t", "groups": ["t"], "queue": "t", "gpuQuota": 0}]})
    [cq] = [d for d in docs if d["kind"] == "ClusterQueue"]
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "0"}


def test_the_controller_gets_the_settings_the_api_reads(render: Render) -> None:
    docs = render(MULTI_TEAM)
    import json

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
        "runAsNonRoot": True,
    }
    [c] = pod["containers"]
    assert c["image"] == "registry.example.com/aviflow/trainer:0.1.0-6045a7bbf179"
    assert c["command"] == [
        "python",
        "-m",
        "aviflow.operator",
        "--settings",
        "/etc/aviflow/cluster.json",
    ]


BAD: list[tuple[str, dict[str, Any], str]] = [
    (
        "typo",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "gpuQuotta": 4}]},
        "at '/teams/0': additional properties 'gpuQuotta' not allowed",
    ),
    (
        "negative quota",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "gpuQuota": -1}]},
        "at '/teams/0/gpuQuota': minimum: got -1, want 0",
    ),
    (
        "team without a queue",
        {"teams": [{"name": "a", "groups": ["a"]}]},
        "at '/teams/0': missing property 'queue'",
    ),
    (
        "profile for an unknown group",
        {
            "profiles": [
                {
                    "slug": "p",
                    "displayName": "P",
                    "cpu": 1,
                    "memory": "1Gi",
                    "image": "nb:1",
                    "groups": ["nobody"],
                }
            ]
        },
        "profiles[p]: group nobody is in no team and no hub.groups entry",
    ),
    (
        "borrowing without a cohort",
        {"teams": [{"name": "a", "groups": ["a"], "queue": "a", "borrowingLimit": 2}]},
        "teams[a]: borrowingLimit and lendingLimit need a cohort",
    ),
    (
        "a key the chart owns",
        {"hub": {"spawner": "local"}},
        "at '/hub': additional properties 'spawner' not allowed",
    ),
    (
        "a bad trainer image name",
        {"api": {"kubernetes": {"images": [{"image": "x:1"}]}}},
        "at '/api/kubernetes/images/0': missing property 'name'",
    ),
]


@pytest.mark.parametrize(("values", "message"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_values_are_refused_by_name(
    render: Render, values: dict[str, Any], message: str
) -> None:
    proc = render(values=values, check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    assert message in proc.stderr, proc.stderr


def test_chart_owned_keys_are_not_in_the_values() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert not set(CHART_OWNED["HubSection"]) & set(values["hub"])
    assert not set(CHART_OWNED["ApiSection"]) & set(values["api"])
