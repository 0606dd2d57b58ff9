"""The build cache every clone shares (``_cache``): an entry is made once however many
processes ask for it at the same time, a failed make leaves nothing, eviction takes the least
recently used first and never what is in use, and a second clone finds what the first built."""

from __future__ import annotations

import doctest
import json
import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import aviflow_layers
import pytest

from aviflow_testcluster import _cache, _image_store, _oci
from oci_layouts import layer, write_layout

HERE = Path(__file__).resolve().parent


def _make_slowly(root: str, log: str) -> str:
    def make(tmp: Path) -> None:
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        (tmp / "out").write_text("made")

    return str(_cache.Cache(Path(root)).entry("thing", "k1").ensure(make))


def test_an_entry_is_made_once_however_many_ask_at_once(tmp_path: Path) -> None:
    log = tmp_path / "makes.log"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(3) as pool:
        paths = pool.starmap(_make_slowly, [(str(tmp_path / "c"), str(log))] * 3)
    assert paths == [str(tmp_path / "c" / "thing" / "k1")] * 3
    assert len(log.read_text().splitlines()) == 1
    assert (Path(paths[0]) / "out").read_text() == "made"
    assert sorted(p.name for p in (tmp_path / "c" / "thing").iterdir()) == [".k1.lock", "k1"]


def test_a_failed_make_leaves_nothing_and_the_next_caller_makes_it(tmp_path: Path) -> None:
    cache = _cache.Cache(tmp_path)
    entry = cache.entry("thing", "k1")

    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("the build failed")

    with pytest.raises(RuntimeError, match="the build failed"):
        entry.ensure(broken)
    assert not entry.ready() and not entry.path.exists()
    assert [p.name for p in (tmp_path / "thing").iterdir()] == [".k1.lock"]
    assert (entry.ensure(lambda d: (d / "ok").write_text("y")) / "ok").read_text() == "y"


def _entry(cache: _cache.Cache, kind: str, key: str, size: int, age_hours: float) -> Path:
    path = cache.entry(kind, key).ensure(lambda d: (d / "blob").write_bytes(b"x" * size))
    used = time.time() - age_hours * 3600
    os.utime(path / _cache.META, (used, used))
    return path


def test_eviction_takes_the_least_recently_used_and_spares_what_is_in_use(tmp_path: Path) -> None:
    cache = _cache.Cache(tmp_path / "c")
    oldest = _entry(cache, "cluster-bin", "a", 400_000, age_hours=30)
    locked = _entry(cache, "images/layers", "b", 400_000, age_hours=20)
    old = _entry(cache, "helm", "c", 400_000, age_hours=10)
    recent = _entry(cache, "images/layers", "d", 400_000, age_hours=0.5)  # within the grace
    assert {e.key: e.size > 400_000 for e in cache.entries()} == dict.fromkeys("abcd", True)
    bound = cache.size() - 500_000  # two entries must go
    with _cache._flock(cache.entry("images/layers", "b").lock_path, shared=True):  # a reader
        removed = _cache.evict(cache, bound=bound)
    assert removed == [oldest, old]
    assert [e.key for e in cache.entries()] == ["b", "d"] and locked.exists() and recent.exists()
    assert not [p for p in (tmp_path / "c").rglob("*evicted*")]
    # within the bound: nothing is touched
    assert _cache.evict(cache, bound=cache.size()) == []
    # over it with only recent entries left: nothing goes, and it says why
    said: list[str] = []
    assert _cache.evict(cache, bound=1, grace=3600 * 24, log=said.append) == []
    assert "used within the last hour" in said[-1]


def test_a_bad_bound_or_key_is_refused() -> None:
    with pytest.raises(ValueError, match="AVIFLOW_CACHE_MAX_GB must be a number of GB, not 'lots'"):
        _cache.max_bytes({"AVIFLOW_CACHE_MAX_GB": "lots"})
    with pytest.raises(ValueError, match="must be above 0"):
        _cache.max_bytes({"AVIFLOW_CACHE_MAX_GB": "-1"})
    for kind, key in (("a", "../b"), ("../a", "b"), ("a", ".hidden"), ("", "b")):
        with pytest.raises(ValueError, match="bad cache entry"):
            _cache.Cache(Path("/c")).entry(kind, key)


def test_clean_removes_the_whole_cache_and_show_lists_it(tmp_path: Path) -> None:
    env = {**os.environ, "AVIFLOW_CACHE_DIR": str(tmp_path / "c")}
    _entry(_cache.Cache(tmp_path / "c"), "helm", "k", 1000, age_hours=2)
    script = HERE / "aviflow_testcluster" / "_cache.py"  # standard library only: no .venv
    shown = subprocess.run(
        ["python3", str(script), "show"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert shown[0].startswith(f"{tmp_path / 'c'}: 0.00 GB (bound 60 GB")
    assert shown[1].endswith("used    2.0 h ago  helm/k")
    subprocess.run(["python3", str(script), "clean"], env=env, capture_output=True, check=True)
    assert not (tmp_path / "c").exists()


def test_a_second_clone_finds_the_binaries_the_first_built(tmp_path: Path) -> None:
    """The keys hash what builds the binaries, never where the checkout is."""
    clone = tmp_path / "clone" / "tests" / "cluster"
    shutil.copytree(HERE / "go", clone / "go")
    shutil.copytree(HERE / "aviflow_testcluster", clone / "aviflow_testcluster")
    code = (
        "import json; from aviflow_testcluster import _build; "
        "print(json.dumps([str(_build.bin_dir()), str(_build.helm_path())]))"
    )
    env = {**os.environ, "AVIFLOW_CACHE_DIR": str(tmp_path / "cache")}

    def paths(where: Path) -> list[str]:
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=where,
            env={**env, "PYTHONPATH": str(where)},
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout)

    mine, theirs = paths(HERE), paths(clone)
    assert mine == theirs
    assert mine[0].startswith(f"{tmp_path / 'cache'}/cluster-bin/")
    assert mine[1].startswith(f"{tmp_path / 'cache'}/helm/") and mine[1].endswith("/helm")
    # a changed pin is a new entry
    with open(clone / "go" / "kueue" / "go.sum", "a") as f:
        f.write("\n")
    assert paths(clone)[0] != mine[0] and paths(clone)[1] == mine[1]


@pytest.mark.parametrize("module", [_cache, _oci, _image_store, aviflow_layers])
def test_the_docstring_examples_hold(module: object) -> None:
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)  # type: ignore[arg-type]
    assert result.failed == 0 and (result.attempted > 0 or module is _image_store), result


def test_past_the_bound_the_oldest_image_build_goes_with_its_own_blobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Image builds are units of eviction too: the oldest one's ref leaves the shared layout,
    ``umoci gc`` frees the blobs only it had, and a newer build keeps every blob it needs."""
    store = _image_store.ImageStore(_cache.Cache(tmp_path / "c"))
    shared = layer({"base/": None, "base/f": "x" * 100_000})
    old, new = layer({"old": os.urandom(150_000).hex()}), layer({"new": "n"})
    write_layout(store.layout, {"trainer-1-aaaa": [shared, old], "trainer-1-bbbb": [shared, new]})
    store.refs.mkdir(parents=True)
    for ref, age_hours in (("trainer-1-aaaa", 30), ("trainer-1-bbbb", 2)):
        stamp = store.refs / ref
        stamp.write_text(json.dumps({"name": "trainer", "id": ""}))
        used = time.time() - age_hours * 3600
        os.utime(stamp, (used, used))
    blobs = lambda: {p.name for p in (store.layout / "blobs" / "sha256").iterdir()}  # noqa: E731
    before = blobs()
    candidates = {c.path.name: c.size for c in store.builds()}
    # (what removing it frees: the blobs no other build has, in the layout and in buildah's)
    assert 3 * len(old) < candidates["trainer-1-aaaa"] < 3 * len(old) + 10_000
    assert candidates["trainer-1-bbbb"] < 10_000
    monkeypatch.setenv("AVIFLOW_CACHE_MAX_GB", str(_cache.du(tmp_path / "c") / 1e9 - 0.0002))
    removed = _image_store.prune(store)
    assert removed == [store.refs / "trainer-1-aaaa"]
    index = json.loads((store.layout / "index.json").read_text())
    refs = [m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]]
    assert refs == ["trainer-1-bbbb"] and [p.name for p in store.refs.iterdir()] == refs
    kept = blobs()
    assert kept < before and len(before - kept) == 3  # the old build's manifest, config, layer
    assert _oci.unpack(store.layout, "trainer-1-bbbb", store.cache).lookup("/base/f") is not None


def test_modules_run_longest_first_by_the_last_runs_times() -> None:
    """What the workers are handed: the modules in order of their last times (or their layer's
    typical time), each module's own tests in their order."""

    class Item:
        def __init__(self, nodeid: str) -> None:
            self.nodeid, self.path = nodeid, aviflow_layers.TESTS.parent / nodeid.split("::")[0]

    ids = [
        "tests/cluster/test_oci.py::a",
        "tests/core/test_spec.py::a",
        "tests/core/test_spec.py::b",
        "tests/k8s/test_trainjobs.py::a",
        "tests/core/test_training.py::a",
        "tests/core/test_training.py::b",
    ]
    known = {"tests/core/test_training.py": 400.0, "tests/core/test_spec.py": 1.0}
    ordered = aviflow_layers.longest_first([Item(i) for i in ids], known)  # type: ignore[list-item]
    assert [i.nodeid for i in ordered] == [
        "tests/core/test_training.py::a",
        "tests/core/test_training.py::b",
        "tests/k8s/test_trainjobs.py::a",  # not measured yet: a k8s module's typical 120 s
        "tests/cluster/test_oci.py::a",  # a cluster module's 10 s
        "tests/core/test_spec.py::a",
        "tests/core/test_spec.py::b",
    ]
