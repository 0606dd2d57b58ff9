"""The training-side API outside a job: a local run directory, a single process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import aviflow
from aviflow import tracking


@pytest.fixture
def local_run(tmp_path, monkeypatch):
    monkeypatch.delenv("AVIFLOW_RUN_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path / ".aviflow" / "run"


def test_log_writes_rows_on_the_main_process_only(local_run, monkeypatch):
    aviflow.log({"loss": 0.5, "lr": 1e-3, "tag": "warmup", "nan": float("nan")}, step=1)
    monkeypatch.setenv("RANK", "1")
    aviflow.log({"loss": 0.25}, step=2)
    rows = [json.loads(line) for line in (local_run / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 1
    assert rows[0]["step"] == 1 and rows[0]["attempt"] == 1
    assert rows[0]["values"] == {"loss": 0.5, "lr": 1e-3, "tag": "warmup", "nan": "nan"}


@pytest.mark.parametrize(
    ("values", "step"), [({}, 1), ({"a": 1}, -1), ({"a": 1}, 1.5), ({"a": object()}, 1), ("x", 1)]
)
def test_log_rejects_bad_input(local_run, values, step):
    with pytest.raises(TypeError):
        aviflow.log(values, step=step)
    assert not (local_run / "metrics.jsonl").exists()


def test_checkpoints_and_resume_in_a_notebook_process(local_run):
    import torch
    from accelerate import Accelerator

    accelerator = Accelerator(cpu=True, log_with=aviflow.tracker())
    accelerator.init_trackers("nb")
    model = accelerator.prepare(torch.nn.Linear(2, 1))
    assert aviflow.resume(accelerator) is None
    for step in (1, 2, 3, 4):
        accelerator.log({"loss": 1.0 / step}, step=step)
        aviflow.save_checkpoint(accelerator, step)
    assert aviflow.checkpoint_dir() == local_run / "checkpoints"
    assert [c.step for c in tracking.checkpoints()] == [2, 3, 4]  # keepLast default 3
    with torch.no_grad():
        model.weight.fill_(42.0)
    assert aviflow.resume(accelerator) == 4
    assert float(model.weight.detach()[0, 0]) != 42.0
    steps = [json.loads(x)["step"] for x in (local_run / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]
    assert not list((local_run / "checkpoints").glob(".*partial"))


def test_importing_aviflow_does_not_import_torch():
    code = "import sys, aviflow; aviflow.TrainJob; aviflow.log; print('torch' in sys.modules, 'accelerate' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False False"
