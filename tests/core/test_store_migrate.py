"""Moving a store of the flat layout of earlier versions in: an explicit step (``aviflow store
migrate``, a writer's start-up), never a read's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aviflow.cli import main
from aviflow.errors import StoreNeedsMigration
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore

JOB = TrainJob.from_dict({"metadata": {"name": "tiny"}, "spec": {"script": "print(1)"}})


def _legacy(root: Path, job_id: str, user: str, submitted: float, state: str) -> Path:
    """A job directory as versions before the per-user layout wrote it: ``<root>/<job-id>/``."""
    d = root / job_id
    (d / "checkpoints" / "step-000000010").mkdir(parents=True)
    (d / "checkpoints" / "step-000000010" / "aviflow-checkpoint.json").write_text('{"step": 10}')
    (d / "job.yaml").write_text(JOB.to_yaml())
    meta = {"id": job_id, "name": "tiny", "user": user, "submitted": submitted,
            "code_hash": "sha256:old", "origin": {}}  # fmt: skip
    (d / "meta.json").write_text(json.dumps(meta))
    (d / "status.json").write_text(json.dumps({"state": state}))
    return d


def _legacy_store(root: Path) -> None:
    _legacy(root, "old-2", "bob", 20.0, "FAILED")
    _legacy(root, "old-1", "ada", 10.0, "SUCCEEDED")
    _legacy(root, "old-3", "ada", 30.0, "RUNNING")  # its supervisor still works there


def _tree(root: Path) -> dict[str, object]:
    """Every path under ``root``: a file's content, a link's target, a directory's mtime."""
    out: dict[str, object] = {}
    for parent, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(parent, name)
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir", path.stat().st_mtime_ns)
            else:
                out[rel] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
    out["."] = ("dir", root.stat().st_mtime_ns)
    return out


def _files(root: Path) -> dict[str, str]:
    """Each file's content and each link's target, by path under ``root``."""
    tree = _tree(root)
    return {
        rel: (v[1].decode() if v[0] == "file" else f"-> {v[1]}")  # type: ignore[index,union-attr]
        for rel, v in tree.items()
        if v[0] != "dir"  # type: ignore[index]
    }


def test_store_migrate_moves_the_finished_jobs_of_a_legacy_store_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _legacy_store(tmp_path)
    before = _files(tmp_path)
    assert main(["store", "migrate", "--root", str(tmp_path)]) == 0
    assert capsys.readouterr().out == (
        f"moved old-1\nmoved old-2\n2 job(s) of an earlier layout moved into {tmp_path}\n"
    )
    after = _files(tmp_path)
    moved = {  # finished jobs under their user, their meta given its current key for the hash
        f"{user}/{job_id}": {"id": job_id, "name": "tiny", "user": user, "submitted": at,
                             "code_hash": "sha256:old", "origin": {}, "codeHash": "sha256:old"}
        for job_id, user, at in (("old-1", "ada", 10.0), ("old-2", "bob", 20.0))
    }  # fmt: skip
    expected = {
        **{k: v for k, v in before.items() if k.startswith("old-3/")},  # unfinished: stays
        ".ids/old-1": "-> ../ada/old-1",
        ".ids/old-2": "-> ../bob/old-2",
        ".ids.jsonl": '{"id":"old-1","user":"ada","time":10.0}\n'
        '{"id":"old-2","user":"bob","time":20.0}\n',
    }
    for new, data in moved.items():
        old = new.split("/")[1]
        for rel, content in before.items():
            if rel.startswith(f"{old}/") and rel != f"{old}/meta.json":
                expected[new + rel.removeprefix(old)] = content
        expected[f"{new}/meta.json"] = json.dumps(data, indent=2)
    assert after == expected
    # what a user reads of them is what the earlier version wrote
    store = RunStore(tmp_path)
    assert store.ids() == ["old-1", "old-2"]
    assert store.get("old-1").meta().code_hash == "sha256:old"
    assert main(["store", "migrate", "--root", str(tmp_path)]) == 0  # again: nothing to move
    assert capsys.readouterr().out == f"0 job(s) of an earlier layout moved into {tmp_path}\n"
    assert _files(tmp_path) == after


def test_reads_of_a_legacy_store_never_write_and_say_which_command_moves_it(
    tmp_path: Path,
) -> None:
    _legacy_store(tmp_path)
    before = _tree(tmp_path)
    store = RunStore(tmp_path)
    hint = f"`aviflow store migrate --root {tmp_path}` moves them in"
    assert store.locate("old-1") is None and store.pending() == []
    with pytest.raises(StoreNeedsMigration, match="job old-1 is in the layout of an earlier"):
        store.get("old-1")
    with pytest.raises(StoreNeedsMigration) as listed:
        store.ids()
    assert str(listed.value) == (
        f"2 jobs (old-1, old-2) are in the layout of an earlier Aviflow version "
        f"(<root>/<job-id>/ in {tmp_path}); {hint} (the local backend, aviflow-api and "
        "the controller also do when they start)"
    )
    with pytest.raises(StoreNeedsMigration, match="aviflow store migrate"):
        store.get("old-2")
    assert store.locate("old-3") is None  # unfinished: no migration would move it either
    assert _tree(tmp_path) == before  # nothing written, moved or touched
    # a create writes its own job only: the legacy ones stay where they are
    new = store.create(JOB, {}, "ada")
    assert store.ids() == [new.id]
    assert {p.name for p in tmp_path.iterdir()} == {
        "old-1", "old-2", "old-3", "ada", ".ids", ".ids.jsonl", ".staging",
    }  # fmt: skip
    with pytest.raises(StoreNeedsMigration, match="job old-1 is in the layout of an earlier"):
        store.get("old-1")


def test_the_local_backend_moves_its_legacy_store_in_when_made(tmp_path: Path) -> None:
    """What a user of an earlier version sees: `aviflow ls` lists the finished jobs."""
    _legacy_store(tmp_path)
    ls = subprocess.run(
        [sys.executable, "-m", "aviflow", "--root", str(tmp_path), "ls"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert ls.stdout.splitlines() == [
        "ID     NAME  STATE      NODES  GPUS  SUBMITTED            START",
        "old-1  tiny  SUCCEEDED  1      1     1970-01-01 00:00:10",
        "old-2  tiny  FAILED     1      1     1970-01-01 00:00:20",
    ]
    assert (tmp_path / "ada" / "old-1" / "job.yaml").is_file()
    assert (tmp_path / "old-3" / "job.yaml").is_file()


def test_a_legacy_meta_file_of_any_shape_moves_in_and_stops_no_one(tmp_path: Path) -> None:
    """A job of an earlier version could write its own meta file: whatever it holds there, the
    migration (run by the controller at start-up) moves the job once, ordered as time 0."""
    _legacy(tmp_path, "old-1", "ada", 10.0, "SUCCEEDED")
    hostile = _legacy(tmp_path, "old-0", "bob", 0.0, "FAILED")
    meta = json.loads((hostile / "meta.json").read_text())
    (hostile / "meta.json").write_text(json.dumps({**meta, "submitted": "soon", "user": ["x"]}))
    assert RunStore(tmp_path).migrate_legacy() == ["old-0", "old-1"]
    assert os.readlink(tmp_path / ".ids" / "old-0") == "../unknown/old-0"
    lines = (tmp_path / ".ids.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == [
        {"id": "old-0", "user": "unknown", "time": 0.0},
        {"id": "old-1", "user": "ada", "time": 10.0},
    ]
    moved = RunDir(RunStore(tmp_path).locate("old-0") or tmp_path)
    assert (moved.meta().user, moved.meta().submitted) == ("unknown", 0.0)
