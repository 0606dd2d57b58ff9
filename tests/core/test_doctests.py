"""Every example in the product's docstrings is true: each module's doctests run here (as
``--doctest-modules`` would; one test per module, so a failure names it)."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["aviflow", "aviflow_hub", "aviflow_magics", "aviflow_jupyter"]
# modules that cannot be imported on their own (a JupyterHub config file run by the hub)
NOT_MODULES = {"aviflow_hub.jupyterhub_config"}


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        pkg = importlib.import_module(package)
        names.append(package)
        for info in pkgutil.walk_packages(pkg.__path__, f"{package}."):
            if info.name not in NOT_MODULES and not info.name.endswith("__main__"):
                names.append(info.name)
    return sorted(names)


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_the_modules_docstring_examples_are_true(name: str) -> None:
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    failed, _ = doctest.testmod(module, optionflags=flags, report=True, verbose=False)
    assert failed == 0, f"{failed} docstring example(s) of {name} are false (see above)"


def test_the_examples_are_run() -> None:
    finder = doctest.DocTestFinder()
    counts = {
        name: sum(len(t.examples) for t in finder.find(importlib.import_module(name)))
        for name in MODULES
    }
    # the packages' examples are found (a finder that sees none would pass every test above)
    assert sum(counts.values()) >= 80
    assert counts["aviflow.paging"] == 5 and counts["aviflow.names"] == 4
