"""Every benchmark in ``bench/`` imports as ``python bench/<name>.py`` would from a fresh
clone (without running it): a clean interpreter (``-I``: no ``PYTHONPATH``, none of the
paths ``tests/conftest.py`` adds), ``bench/`` first on ``sys.path``, outside the checkout.
A benchmark only runs under ``if __name__ == "__main__":``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(BENCH.glob("*.py"))
IMPORT = """
import runpy, sys
sys.path.insert(0, sys.argv[1])
runpy.run_path(sys.argv[2], run_name="bench_import")
"""


def has_main_guard(path: Path) -> bool:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in (
            "__name__ == '__main__'",
            "'__main__' == __name__",
        ):
            return True
    return False


def test_every_benchmark_is_found() -> None:
    assert {"admission.py", "launch.py", "_paths.py"} <= {p.name for p in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_benchmark_imports(script: Path, tmp_path: Path) -> None:
    if script.name != "_paths.py":  # a helper, not a script
        assert has_main_guard(script), f"{script.name} runs on import: no __main__ guard"
    proc = subprocess.run(
        [sys.executable, "-I", "-c", IMPORT, str(BENCH), str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
