"""Fixtures of the Kubernetes tests (the test control plane itself: ``tests/cluster``)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from aviflow.k8s.crd import NAME, committed


@pytest.fixture(scope="session")
def crd_installed(k8s_cluster: Any) -> Any:
    k8s_cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=committed())
    k8s_cluster.kubectl("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=60s")
    # the API server serves the new resource a moment after it is Established
    deadline = time.monotonic() + 60
    while k8s_cluster.kubectl("get", "trainjobs", "-A", check=False).returncode != 0:
        assert time.monotonic() < deadline, "trainjobs are not served"
        time.sleep(0.5)
    return k8s_cluster
