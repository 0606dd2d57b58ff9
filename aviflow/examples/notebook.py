"""The example notebooks: a short introduction and one ``%%aviflow_train`` cell that trains a
small model on 2 nodes x 2 GPUs (CPU processes with gloo on the local backend).

:func:`example_notebook` is the one source for the notebook a first login finds in its home
directory and for the one the JupyterLab launcher card "New training job" creates;
:func:`llm_notebook` fine-tunes a language model with FSDP (:mod:`aviflow.examples.llm`).
Pure: nbformat 4 JSON. ``python -m aviflow.examples.notebook llm > aviflow-llm.ipynb``
writes one.
"""

from __future__ import annotations

import json
import sys
from typing import Any

EXAMPLE_NAME = "aviflow-example.ipynb"
LLM_EXAMPLE_NAME = "aviflow-llm.ipynb"

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


LLM_INTRO = """\
# Fine-tune a language model with FSDP

The cell below runs Aviflow's LLM recipe (`aviflow/examples/llm.py`) on 2 nodes x 2 GPUs
with `--strategy fsdp`: a Llama-style `transformers` model sharded over the ranks (FSDP2),
gradient accumulation, eval perplexity and sharded checkpoints that resume on any number of
nodes (`--resume auto`). By default it trains a tiny model on a corpus it makes itself;
`--env LLM_MODEL=<hub id or directory>` fine-tunes a real one (`from_pretrained`) and
`--env LLM_CORPUS=<text file>` trains on your text. The panel charts `loss`, `eval_ppl` and
the `tokens` counter (tokens/s)."""

LLM_TRAIN = """\
%%aviflow_train --nodes 2 --gpus-per-node 2 --strategy fsdp --time-limit 20m --name tiny-llm --out job
from aviflow.examples.llm import main

main()"""


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


def _notebook(intro: str, train: str) -> dict[str, Any]:
    return {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
            "language_info": {"name": "python"},
        },
        "cells": [
            _cell("markdown", intro, "aviflow-intro"),
            _cell("code", LOAD, "aviflow-load"),
            _cell("code", train, "aviflow-train"),
        ],
    }


def example_notebook() -> dict[str, Any]:
    """The example notebook as nbformat 4.5 JSON."""
    return _notebook(INTRO, TRAIN)


def llm_notebook() -> dict[str, Any]:
    """The LLM fine-tuning notebook as nbformat 4.5 JSON."""
    return _notebook(LLM_INTRO, LLM_TRAIN)


NOTEBOOKS = {"example": example_notebook, "llm": llm_notebook}


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "example"
    if which not in NOTEBOOKS:
        sys.exit(f"usage: python -m aviflow.examples.notebook [{'|'.join(NOTEBOOKS)}]")
    sys.stdout.write(json.dumps(NOTEBOOKS[which](), indent=1) + "\n")
