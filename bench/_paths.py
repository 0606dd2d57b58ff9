"""The test tree's helper modules on ``sys.path``, for a benchmark run as a script from a
fresh clone (``python bench/admission.py``): ``aviflow_testcluster`` (the test control
plane, ``tests/cluster``), ``aviflow_pool`` (Aviflow on it, ``tests/k8s``) and what that
imports, ``aviflow_images`` (``tests/images``). The suite gets them from ``tests/conftest.py``;
``tests/core/test_bench_imports.py`` imports every benchmark the way a script run does.

    import _paths  # noqa: F401  (before the first test-tree import)
"""

from __future__ import annotations

import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
HELPERS = [TESTS / "cluster", TESTS / "k8s", TESTS / "images"]

for _dir in reversed(HELPERS):
    if str(_dir) not in sys.path:
        sys.path.insert(0, str(_dir))
