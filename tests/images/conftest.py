"""Fixtures of the image tests: the images built by ``images/build.sh`` (once per session,
its layer cache and wheelhouse kept in ``images/.build``), each unpacked once per digest,
and ``run_in(name, argv, ...)``, which runs a command inside an image as its user.

``images/build.sh`` holds a lock of its own, so sessions started in parallel build in turn.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from aviflow_testcluster import _oci

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / ".build"
IMAGES = ("hub", "notebook", "trainer")
BUILD_TIMEOUT = 2700


@pytest.fixture(scope="session")
def built_images() -> dict[str, dict[str, Any]]:
    """``images/build.sh`` for all three; its report row per image (tag, digest, layout)."""
    t0 = time.monotonic()
    proc = subprocess.run(
        ["bash", str(ROOT / "images" / "build.sh"), *IMAGES],
        cwd=ROOT,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT,
    )
    assert proc.returncode == 0, (
        f"images/build.sh failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    rows = [json.loads(line) for line in (BUILD / "images.jsonl").read_text().splitlines()]
    print(f"images built in {time.monotonic() - t0:.0f} s:\n{proc.stdout}", file=sys.stderr)
    return {row["name"]: row for row in rows}


@pytest.fixture(scope="session")
def bundles(built_images: dict[str, dict[str, Any]]) -> dict[str, _oci.Bundle]:
    return {
        name: _oci.unpack(Path(row["layout"]), row["ref"], BUILD / "bundles")
        for name, row in built_images.items()
    }


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
