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
``make_job``
    ``make_job(state, nodes=2, gpus_per_node=2, metrics=0, checkpoints=(), failure=None,
    queue_position=None)`` writes a job into the run store the way the supervisor and the
    runtime do (status, events, metrics, checkpoints, failure records, rank logs) and, for an
    unfinished state, holds the supervisor lock as a live supervisor would. Returns a
    :class:`~aviflow.job.Job` on ``local_backend``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import comm
import pytest
from comm.base_comm import BaseComm

from aviflow import _procs
from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.job import Job
from aviflow.records import Event, EventType, FailureInfo, JobState, JobStatus, MetricRow
from aviflow.spec import TrainJob
from aviflow.store import CHECKPOINT_MARKER, atomic_write


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


def _spec(name: str, nodes: int, gpus_per_node: int) -> TrainJob:
    return TrainJob.from_dict(
        {
            "apiVersion": "aviflow.dev/v1",
            "kind": "TrainJob",
            "metadata": {"name": name},
            "spec": {"nodes": nodes, "gpusPerNode": gpus_per_node, "script": "print('hi')\n"},
        }
    )


@pytest.fixture
def make_job(local_backend: LocalBackend) -> Iterator[Any]:
    locks: list[_procs.FileLock] = []

    def make(
        state: JobState,
        *,
        name: str = "fab",
        nodes: int = 2,
        gpus_per_node: int = 2,
        metrics: int = 0,
        checkpoints: tuple[int, ...] = (),
        failure: FailureInfo | None = None,
        queue_position: int | None = None,
        log_lines: int = 3,
        origin: dict | None = None,
    ) -> Job:
        job = _spec(name, nodes, gpus_per_node)
        bundle = build_bundle(job, origin=origin or {})
        run = local_backend.store.create(
            job,
            bundle.store_files(),
            "tester",
            backend="local",
            code_hash=bundle.content_hash,
            origin=bundle.origin,
        )
        if not state.is_finished():
            lock = _procs.FileLock(run.supervisor_lock)
            assert lock.acquire(blocking=False)
            locks.append(lock)
        t0 = time.time() - 120
        meta = json.loads(run.meta_path.read_text())
        run.meta_path.write_text(json.dumps({**meta, "submitted": t0}))
        queued = Event(EventType.QUEUED, 0, "waiting for GPU slots", t0)
        run.record([queued], JobStatus(JobState.QUEUED, 0, queued.message, t0, queue_position))
        if state is not JobState.QUEUED:
            run.record(
                [
                    Event(EventType.STARTING, 1, "starting", t0 + 1),
                    Event(EventType.RUNNING, 1, "running", t0 + 2),
                ],
                JobStatus(JobState.RUNNING, 1, "running", t0 + 2),
            )
            for rank in range(nodes * gpus_per_node):
                path = run.rank_log(rank)
                path.write_text("".join(f"rank {rank} line {i}\n" for i in range(log_lines)))
        for step in range(1, metrics + 1):
            run.append_metric(
                MetricRow(
                    step, t0 + 2 + step * 0.01, 1, {"loss": 1.0 / step, "lr": 0.1 / (1 + step % 7)}
                )
            )
        for step in checkpoints:
            d = run.checkpoint_dir(step)
            d.mkdir(parents=True)
            atomic_write(
                d / CHECKPOINT_MARKER, json.dumps({"step": step, "time": t0 + 3, "attempt": 1})
            )
        if state is JobState.FAILED:
            data = {"failure": failure.to_dict()} if failure else {}
            run.record(
                [Event(EventType.FAILED, 1, "rank 3 failed", t0 + 60, data)],
                JobStatus(JobState.FAILED, 1, "rank 3 failed", t0 + 60, failure=failure),
            )
        elif state.is_finished():
            run.record(
                [Event(EventType(state.value), 1, "done", t0 + 60)],
                JobStatus(state, 1, "done", t0 + 60),
            )
        return Job(run.id, local_backend)

    yield make
    for lock in locks:
        lock.release()


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
