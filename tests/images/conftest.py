"""Fixtures of the image tests: ``run_in(name, argv, ...)`` runs a command inside an image
as its user (``built_images`` and ``bundles`` come from ``aviflow_images.py``, shared by every
layer)."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from aviflow_testcluster import _oci

RunIn = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_in(bundles: dict[str, _oci.Bundle], tmp_path: Path) -> RunIn:
    """``run_in(image, argv, env=None, binds=(), timeout=300)``: run ``argv`` inside the image
    as its user (its own writable layer, removed with the test's tmp dir)."""
    count = 0

    def run(
        image: str,
        argv: Sequence[str],
        env: dict[str, str] | None = None,
        binds: Sequence[tuple[Path, str, bool]] = (),
        timeout: float = 300,
    ) -> subprocess.CompletedProcess[str]:
        nonlocal count
        count += 1
        rw = Path(tempfile.mkdtemp(prefix=f"rw{count}-", dir=tmp_path))
        # /etc/hosts comes from the host, as the kubelet or a container engine provides it
        hosts = (Path("/etc/hosts"), "/etc/hosts", True)
        return subprocess.run(
            _oci.run_argv(bundles[image], rw, argv, env=env, binds=[hosts, *binds]),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
