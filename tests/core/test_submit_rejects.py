"""Bad submissions fail with a clear message and write nothing."""

from __future__ import annotations

import re

import pytest

import aviflow
from aviflow.errors import BackendError, SpecError


def spec(**changes):
    data = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "bad"},
        "spec": {"nodes": 1, "gpusPerNode": 1, "script": "print(1)"},
    }
    data["spec"].update(changes)
    data["spec"] = {k: v for k, v in data["spec"].items() if v is not None}
    return data


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        ({"nodes": 0}, SpecError, "spec.nodes: must be between 1 and 512"),
        ({"gpusPerNode": 9}, SpecError, "an HGX node has 8 GPUs"),
        ({"gpusPerNodes": 2}, SpecError, "did you mean 'gpusPerNode'?"),
        (
            {"script": None, "scriptFile": "missing.py"},
            SpecError,
            "does not exist or is not a regular file",
        ),
        (
            {"script": None, "scriptFile": "../outside.py"},
            SpecError,
            "climbs out of the spec's directory",
        ),
        ({"accelerate": {"configFile": "nope.yaml"}}, SpecError, "spec.accelerate.configFile"),
        (
            {"nodes": 4, "gpusPerNode": 4},
            BackendError,
            "needs 16 GPU slots (4 nodes x 4) but this local backend has 8",
        ),
    ],
)
def test_rejected_and_nothing_written(local_backend, run_root, tmp_path, changes, error, message):
    with pytest.raises(error, match=re.escape(message)):
        aviflow.submit(spec(**changes), backend=local_backend, base_dir=tmp_path)
    assert not run_root.exists() or list(run_root.iterdir()) == []


def test_a_directory_is_not_a_script(local_backend, run_root, tmp_path):
    (tmp_path / "dir.py").mkdir()
    with pytest.raises(SpecError, match="not a regular file"):
        aviflow.submit(
            spec(script=None, scriptFile="dir.py"), backend=local_backend, base_dir=tmp_path
        )
    assert not run_root.exists()


def test_a_non_python_script_file_is_refused(local_backend, run_root, tmp_path):
    (tmp_path / "train.sh").write_text("echo hi")
    with pytest.raises(SpecError, match=r"is not a \.py file; run other programs with `command`"):
        aviflow.submit(
            spec(script=None, scriptFile="train.sh"), backend=local_backend, base_dir=tmp_path
        )
    assert not run_root.exists()


def test_bad_accelerate_config_is_refused(local_backend, run_root, tmp_path):
    (tmp_path / "acc.yaml").write_text("- not\n- a mapping\n")
    with pytest.raises(SpecError, match="must be an `accelerate config` YAML mapping"):
        aviflow.submit(
            spec(accelerate={"configFile": "acc.yaml"}), backend=local_backend, base_dir=tmp_path
        )
    assert not run_root.exists()


def test_unknown_backend(run_root):
    with pytest.raises(BackendError, match=r"unknown backend 'nope'; available: .*local"):
        aviflow.submit(spec(), backend="nope")
    assert not run_root.exists()


def test_missing_spec_file(run_root, tmp_path):
    with pytest.raises(SpecError, match="no such spec file"):
        aviflow.submit(tmp_path / "missing.yaml")


def test_get_unknown_job(local_backend):
    with pytest.raises(aviflow.JobNotFound, match="no job 'nope-12345678'"):
        aviflow.get("nope-12345678", backend=local_backend)
