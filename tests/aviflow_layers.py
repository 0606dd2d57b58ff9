"""The suite's layers (registered by ``tests/conftest.py``): every test carries the marker of
its layer, the directory it is in (``pytest -m hub`` runs the hub layer alone; ``-m "not
images"`` leaves one out), and ``hub`` also goes to every test that starts a real JupyterHub.
At the end of a run the time per layer is printed: each test's setup, call and teardown summed
by layer (a module's shared hub or cluster counts to the layer of the first test that needs
it), beside the session's wall time; ``make test`` adds the 25 slowest tests
(``--durations=25``).

``make test`` runs the modules on two workers (pytest-xdist, ``--dist loadscope``: a module
and its fixtures stay on one worker), longest first: each module's time in the last full run
is kept in the build cache (``<cache>/test-durations.json``, so every clone on the machine
learns it), and a module it has no time for counts as its layer's typical one. The slowest
modules start at once and the short ones fill in around them.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import defaultdict
from pathlib import Path

import pytest

from aviflow_testcluster import _cache

TESTS = Path(__file__).resolve().parent
LAYERS = ("core", "cluster", "k8s", "notebook", "extensions", "hub", "helm", "images")
# fixtures that start a real JupyterHub (tests/hub/conftest.py)
HUB_FIXTURES = frozenset({"real_hub", "hub_factory"})

# a module's seconds when no run measured it yet: its layer's typical module (a guess)
TYPICAL = {"k8s": 120, "core": 30, "helm": 100, "images": 60, "hub": 20, "notebook": 15,
           "extensions": 20, "cluster": 10}  # fmt: skip
DURATIONS = "test-durations.json"

_seconds: dict[str, float] = defaultdict(float)
_tests: dict[str, set[str]] = defaultdict(set)
_module_seconds: dict[str, float] = defaultdict(float)
_started = time.monotonic()
_root: list[Path] = []
_deselected: list[int] = [0]


def durations_path() -> Path:
    return _cache.cache_root() / DURATIONS


def known_durations() -> dict[str, float]:
    """Each module's seconds in the last full run that had it (``{}`` when none did)."""
    try:
        data = json.loads(durations_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}


def longest_first(items: list[pytest.Item], known: dict[str, float]) -> list[pytest.Item]:
    """``items`` with their modules in order of expected time, longest first (a module's own
    order is kept)."""

    def weight(item: pytest.Item) -> float:
        module = item.nodeid.split("::", 1)[0]
        if module in known:
            return known[module]
        return TYPICAL.get(layer_of(Path(str(item.path))) or "", 10)

    return sorted(items, key=lambda item: -weight(item))


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


def pytest_deselected(items: list[pytest.Item]) -> None:
    _deselected[0] += len(items)


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        layer = layer_of(Path(str(item.path)))
        if layer is not None:
            item.add_marker(layer)
        if HUB_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker("hub")
    if hasattr(config, "workerinput"):  # an xdist worker: the scheduler takes this order
        items[:] = longest_first(items, config.workerinput.get("aviflow_durations", {}))


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """(xdist, on the controller) Every worker orders by the same times, read once here: a
    session that ends meanwhile may rewrite the file, and workers that collect different
    orders abort the run."""
    node.workerinput["aviflow_durations"] = known_durations()  # type: ignore[attr-defined]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    path = Path(report.nodeid.split("::", 1)[0])
    layer = layer_of(_root[0] / path if _root else path) or "other"
    _seconds[layer] += report.duration
    _tests[layer].add(report.nodeid)
    _module_seconds[str(path)] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Keep each module's time for the next run's order, from a run that selected every test
    of what it collected (a ``-k`` or ``-m`` run's partial times would mislead)."""
    config = session.config
    selected = (
        config.option.keyword or config.option.markexpr or any("::" in a for a in config.args)
    )
    if hasattr(config, "workerinput") or _deselected[0] or selected or not _module_seconds:
        return
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
        return
    known = {**known_durations(), **{m: round(s, 1) for m, s in _module_seconds.items()}}
    path = durations_path()
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
        tmp.replace(path)


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
