"""Fixtures for the notebook layer (magics and panel). Shared ones (``run_root``,
``local_backend``) come from ``tests/conftest.py``.

``shell``
    An IPython ``InteractiveShell`` with ``%load_ext aviflow`` done and an empty user
    namespace (besides IPython's own names).
``comms``
    Every widget comm opened during the test is a :class:`RecordingComm`; the fixture is
    the list of them. Each keeps the messages the kernel would have sent.
``train_cell``
    The body of a tiny training cell (2-layer MLP, accelerate + aviflow tracker and
    checkpoints, resumable); reads ``cfg = {"steps", "every", "lr"}`` shipped with ``--vars``.
``make_job`` (tests/conftest.py)
    A job written into the run store as the supervisor and the runtime would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import comm
import pytest
from comm.base_comm import BaseComm


class RecordingComm(BaseComm):
    """A widget comm that records what it publishes instead of sending it to a frontend."""

    def __init__(self, **kwargs: Any) -> None:
        self.messages: list[dict[str, Any]] = []
        super().__init__(**kwargs)

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:
        self.messages.append({"msg_type": msg_type, "data": data, "buffers": list(buffers or [])})

    def updates(self) -> list[dict[str, Any]]:
        """The ``update`` state dicts sent so far."""
        return [
            m["data"]["state"]
            for m in self.messages
            if m["msg_type"] == "comm_msg" and (m["data"] or {}).get("method") == "update"
        ]


@pytest.fixture
def comms(monkeypatch: pytest.MonkeyPatch) -> list[RecordingComm]:
    opened: list[RecordingComm] = []

    def create(**kwargs: Any) -> RecordingComm:
        c = RecordingComm(**kwargs)
        opened.append(c)
        return c

    monkeypatch.setattr(comm, "create_comm", create)
    return opened


@pytest.fixture
def shell(run_root: Path) -> Iterator[Any]:
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "aviflow")
    before = set(sh.user_ns)
    yield sh
    for name in set(sh.user_ns) - before:
        del sh.user_ns[name]


TRAIN_CELL = """\
import torch
from accelerate import Accelerator
import aviflow

accelerator = Accelerator(log_with=aviflow.tracker())
accelerator.init_trackers("nb-e2e", config=cfg)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
model, optimizer = accelerator.prepare(model, optimizer)
start = (aviflow.resume(accelerator) or 0) + 1
accelerator.print(f"starting at step {start}")
for step in range(start, cfg["steps"] + 1):
    gen = torch.Generator().manual_seed(step * 100 + accelerator.process_index)
    x = torch.rand(32, 1, generator=gen) * 2 - 1
    loss = torch.nn.functional.mse_loss(model(x), 3 * x - 1)
    optimizer.zero_grad()
    accelerator.backward(loss)
    optimizer.step()
    accelerator.log({"loss": accelerator.reduce(loss.detach(), reduction="mean").item()}, step=step)
    if step % cfg["every"] == 0:
        aviflow.save_checkpoint(accelerator, step)
accelerator.end_training()
"""


@pytest.fixture
def train_cell() -> str:
    return TRAIN_CELL
