"""The JupyterLab extension's own checks, run by ``make test``: its jest unit tests (model,
poller, sidebar and job view DOM, API errors) and TypeScript's type check of the sources and
tests. ``make labextension`` installs its npm packages (``npm ci`` from the lock)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

LABEXT = Path(__file__).resolve().parents[2] / "extensions" / "labextension"


def npm(*args: str) -> subprocess.CompletedProcess[str]:
    assert (LABEXT / "node_modules" / ".bin" / "jest").exists(), (
        "extensions/labextension has no npm packages: run `make labextension`"
    )
    return subprocess.run(
        ["npm", "run", "--silent", *args],
        cwd=LABEXT,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "CI": "true", "HOME": str(Path.home())},
    )


@pytest.mark.parametrize("script", ["test", "typecheck"])
def test_the_extensions_own_checks_pass(script: str) -> None:
    proc = npm(script)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    if script == "test":
        summary = re.search(r"Tests:\s+(\d+) passed, (\d+) total", proc.stderr)
        assert summary and summary[1] == summary[2] and int(summary[1]) >= 60, proc.stderr[-3000:]
