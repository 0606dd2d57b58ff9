"""One dependency lock (requirements.lock) for .venv and the three images: it must be current
with pyproject.toml and constraints.txt (re-pinning it with `make lock` changes nothing)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(600)


def test_the_committed_lock_is_current(tmp_path: Path) -> None:
    out = tmp_path / "requirements.lock"
    shutil.copy(ROOT / "requirements.lock", out)
    uv = Path(sys.executable).parent / "uv"
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "lock.sh"), str(out)],
        env={**os.environ, "UV": str(uv)},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert proc.returncode == 0, proc.stderr
    assert out.read_text() == (ROOT / "requirements.lock").read_text(), (
        "requirements.lock is stale: run `make lock` and commit it"
    )


def test_the_venv_is_installed_from_the_lock() -> None:
    from importlib.metadata import version

    pins = dict(
        line.split("==", 1)
        for line in (ROOT / "requirements.lock").read_text().splitlines()
        if "==" in line and not line.startswith(("#", " "))
    )
    for name in ("torch", "accelerate", "jupyterhub", "ipywidgets", "kubernetes"):
        assert version(name) == pins[name]
