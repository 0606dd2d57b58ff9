"""The suite's layers (registered by ``tests/conftest.py``): every test carries the marker of
its layer, the directory it is in (``pytest -m hub`` runs the hub layer alone; ``-m "not
images"`` leaves one out), and ``hub`` also goes to every test that starts a real JupyterHub.
At the end of a run the time per layer is printed: each test's setup, call and teardown summed
by layer (a module's shared hub or cluster counts to the layer of the first test that needs
it), beside the session's wall time; ``make test`` adds the 25 slowest tests
(``--durations=25``).
"""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
LAYERS = ("core", "cluster", "k8s", "notebook", "extensions", "hub", "helm", "images")
# fixtures that start a real JupyterHub (tests/hub/conftest.py)
HUB_FIXTURES = frozenset({"real_hub", "hub_factory", "shared_hub"})

_seconds: dict[str, float] = defaultdict(float)
_tests: dict[str, set[str]] = defaultdict(set)
_started = time.monotonic()
_root: list[Path] = []


def layer_of(path: Path) -> str | None:
    """The layer of a test file: its directory under ``tests/``.

    >>> layer_of(TESTS / "hub" / "test_ledger.py"), layer_of(TESTS / "conftest.py")
    ('hub', None)
    """
    try:
        parts = path.resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in LAYERS else None


def pytest_configure(config: pytest.Config) -> None:
    _root[:] = [config.rootpath]


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        layer = layer_of(Path(str(item.path)))
        if layer is not None:
            item.add_marker(layer)
        if HUB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("hub")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = Path(report.nodeid.split("::", 1)[0])
    layer = layer_of(_root[0] / path if _root else path) or "other"
    _seconds[layer] += report.duration
    _tests[layer].add(report.nodeid)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _seconds:
        return
    tr = terminalreporter
    tr.write_sep("=", "time per layer (setup + call + teardown of its tests)")
    for layer in sorted(_seconds, key=lambda name: -_seconds[name]):
        minutes, seconds = divmod(round(_seconds[layer]), 60)
        tr.write_line(
            f"{layer:>11}  {minutes:3d} min {seconds:02d} s  {len(_tests[layer]):4d} tests"
        )
    total = sum(_seconds.values())
    wall = time.monotonic() - _started
    tr.write_line(
        f"{'all':>11}  {int(total // 60):3d} min {round(total % 60):02d} s  "
        f"{sum(map(len, _tests.values())):4d} tests; session wall time "
        f"{int(wall // 60)} min {round(wall % 60):02d} s (with collection and builds)"
    )
