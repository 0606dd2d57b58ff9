"""The images built by ``images/build.sh`` for every test layer (registered by
``tests/conftest.py``): ``built_images`` (session) builds the hub, notebook and trainer once
per session (what builds them, in the build cache every clone shares: nothing is rebuilt that
any clone built before) and returns each image's report row (tag, digest, layout, pinned
packages); ``bundles`` (session) unpacks each, every layer once in that cache. ``trainer_images_entry(row)`` is the row as an entry of the cluster
settings' ``images`` list; ``own_cluster(workdir, ...)`` is a small control plane of a test
module's own, not in host mode (a pod runs in its image or not at all).

``images/build.sh`` holds the image store's lock, so sessions (of any clone) build in turn.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aviflow_testcluster import Cluster, _build, _oci

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / ".build"
IMAGES = ("hub", "notebook", "trainer")
BUILD_TIMEOUT = 2700


@functools.cache
def _build_images() -> subprocess.CompletedProcess[str]:
    """``images/build.sh`` for all three, once per process (each worker's; the build script
    holds the image store's lock, and builds nothing that is in the build cache)."""
    t0 = time.monotonic()
    cmd = ["bash", str(ROOT / "images" / "build.sh"), *IMAGES]
    try:
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            env={**os.environ, "PYTHON": sys.executable},
            capture_output=True,
            text=True,
            timeout=BUILD_TIMEOUT,
        )
    except subprocess.TimeoutExpired as exc:  # every test that needs them says so
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else ""
        proc = subprocess.CompletedProcess(cmd, -1, out, f"timed out after {BUILD_TIMEOUT} s")
    print(f"images built in {time.monotonic() - t0:.0f} s:\n{proc.stdout}", file=sys.stderr)
    return proc


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected
def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    """Builds the images before the first test when a selected test needs them, as the
    control plane's binaries are: outside every test's timeout (a cold build fetches a
    Debian base and torch, which can take longer than one test may)."""
    if any("built_images" in getattr(item, "fixturenames", ()) for item in items):
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.write_line("aviflow images: building (cached: seconds; cold: many minutes)")
        _build_images()


@pytest.fixture(scope="session")
def built_images() -> dict[str, dict[str, Any]]:
    """``images/build.sh`` for all three; its report row per image (tag, digest, layout)."""
    proc = _build_images()
    assert proc.returncode == 0, (
        f"images/build.sh failed:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}"
    )
    rows = [json.loads(line) for line in (BUILD / "images.jsonl").read_text().splitlines()]
    return {row["name"]: row for row in rows}


@pytest.fixture(scope="session")
def bundles(built_images: dict[str, dict[str, Any]]) -> dict[str, _oci.Bundle]:
    return {
        name: _oci.unpack(Path(row["layout"]), row["ref"]) for name, row in built_images.items()
    }


def trainer_images_entry(row: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A built image's report row as an entry of ``ClusterSettings.images``."""
    return {
        "name": name or f"trainer-{row['lockHash']}",
        "image": row["image"],
        "lockHash": row["lockHash"],
        "packages": row["packages"],
    }


@contextmanager
def own_cluster(workdir: Path, hgx_nodes: int = 1, cpu_nodes: int = 1) -> Iterator[Cluster]:
    """A cluster of the caller's own, not in host mode; stopped afterwards, leaving no
    process (for cluster-scoped objects that must not meet the session cluster's)."""
    _build.build()
    cluster = Cluster.start(
        workdir, hgx_nodes=hgx_nodes, cpu_nodes=cpu_nodes, die_with_parent=True, host_mode=False
    )
    try:
        yield cluster
    finally:
        cluster.stop()
    assert cluster.processes() == []
