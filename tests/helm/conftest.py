"""Fixtures of the chart tests (``helm/aviflow``): ``helm`` (session) is the helm CLI built
from the Go module proxy (``make helm``; cached like the control-plane binaries), and
``render(*value_files, values=..., check=True)`` runs ``helm template`` (with
:data:`TRIAL`'s values when no file is given) and returns the objects (or, with
``check=False``, the finished process)."""

from __future__ import annotations

import base64
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow_hub.config import HubConfig
from aviflow_testcluster import _build

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "aviflow"
EXAMPLES = ROOT / "helm" / "examples"
# What a render without value files adds to the chart's defaults: the chart has no default
# password, and keeps the dev login off public addresses unless told (a trial's values)
TRIAL = {"auth": {"dev": {"userPassword": "chart-test-password", "allowOnPublicAddress": True}}}


@pytest.fixture(scope="session")
def helm() -> Path:
    return _build.build_helm()


Render = Callable[..., Any]


@pytest.fixture
def render(helm: Path, tmp_path: Path) -> Render:
    def run(
        *value_files: Path,
        values: dict[str, Any] | None = None,
        namespace: str = "aviflow",
        release: str = "aviflow",
        check: bool = True,
    ) -> Any:
        argv = [str(helm), "template", release, str(CHART), "--namespace", namespace]
        if not value_files:
            trial = tmp_path / "trial-values.yaml"
            trial.write_text(yaml.safe_dump(TRIAL))
            value_files = (trial,)
        for f in value_files:
            argv += ["-f", str(f)]
        if values is not None:
            extra = tmp_path / f"values-{len(list(tmp_path.iterdir()))}.yaml"
            extra.write_text(yaml.safe_dump(values))
            argv += ["-f", str(extra)]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if not check:
            return proc
        assert proc.returncode == 0, proc.stderr
        return [d for d in yaml.safe_load_all(proc.stdout) if d]

    return run


def doc(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return found


def hub_config_of(docs: list[dict[str, Any]]) -> HubConfig:
    secret = doc(docs, "Secret", "aviflow-hub")
    return HubConfig.from_yaml(base64.b64decode(secret["data"]["hub.yaml"]).decode())
