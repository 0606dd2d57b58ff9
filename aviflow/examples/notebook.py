"""The example notebook: a short introduction and one ``%%aviflow_train`` cell that trains a
small model on 2 nodes x 2 GPUs (CPU processes with gloo on the local backend).

One source for the notebook a first login finds in its home directory and for the one the
JupyterLab launcher card "New training job" creates (pure: nbformat 4 JSON).
"""

from __future__ import annotations

from typing import Any

EXAMPLE_NAME = "aviflow-example.ipynb"

INTRO = """\
# Train on the GPU pool from this notebook

The cell below is a training script. `%%aviflow_train` sends it to the pool as a multi-node
[accelerate](https://huggingface.co/docs/accelerate) job in your team's queue: every rank runs
the cell, `aviflow.tracker()` brings its metrics back here, and `aviflow.save_checkpoint`
keeps checkpoints a later job can resume from (`--resume auto`).

Run both cells. The panel under the cell shows the job live (status, queue position, loss
chart, per-rank logs, checkpoints, cancel); the **Aviflow** sidebar lists all your jobs and
your team's quota. Change `--nodes`, `--gpus-per-node` and `--time-limit` for real work;
`%%aviflow_train?` lists every option and `--dry-run` shows what would be submitted."""

LOAD = "%load_ext aviflow"

TRAIN = """\
%%aviflow_train --nodes 2 --gpus-per-node 2 --time-limit 10m --name tiny-regression --out job
import torch
from accelerate import Accelerator

import aviflow

accelerator = Accelerator(log_with=aviflow.tracker())
accelerator.init_trackers("tiny-regression")
model = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
model, optimizer = accelerator.prepare(model, optimizer)
start = (aviflow.resume(accelerator) or 0) + 1
for step in range(start, 61):
    x = torch.rand(64, 1) * 2 - 1
    loss = torch.nn.functional.mse_loss(model(x), 3 * x - 1)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), reduction="mean").item()}, step=step)
    if step % 20 == 0:
        aviflow.save_checkpoint(accelerator, step)"""


def _cell(cell_type: str, source: str, cell_id: str) -> dict[str, Any]:
    cell: dict[str, Any] = {
        "cell_type": cell_type,
        "id": cell_id,
        "metadata": {},
        "source": source.splitlines(keepends=True),
    }
    if cell_type == "code":
        cell["execution_count"] = None
        cell["outputs"] = []
    return cell


def example_notebook() -> dict[str, Any]:
    """The example notebook as nbformat 4.5 JSON."""
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            _cell("markdown", INTRO, "aviflow-intro"),
            _cell("code", LOAD, "aviflow-load"),
            _cell("code", TRAIN, "aviflow-train"),
        ],
    }
