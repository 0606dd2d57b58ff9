"""``stalling``: a local backend whose calls stall and whose "controller" can be down.

A fault-injecting fake for aviflow-api's tests (``test_api_stalls.py``), which installs it
for a hub's aviflow-api: a copy of this module in a directory of its own with an entry point
(``aviflow.backends: stalling``), and that directory on the service's ``PYTHONPATH``. The
directory also holds the backend's run store (``runs/``) and its switches:

``stall``
    While it exists, every call aviflow-api makes of the backend (submit, the reads, images,
    request_cancel) waits, :data:`MAX_STALL` seconds at most: a run store on a hung mount,
    an API server that stopped answering. Each waiting call has a file in ``stalled/``,
    named ``<thread>-<method>-<n>``, so a test knows which lane's workers are held.
``controller-down``
    While it exists, cancel requests are accepted (as the cancel annotation on a TrainJob is)
    but nothing acts on them; once it is gone, they are carried out.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aviflow.backends.local import LocalBackend
from aviflow.bundle import CodeBundle
from aviflow.paging import Batch
from aviflow.records import (
    CheckpointRef,
    Event,
    FailureInfo,
    JobMeta,
    JobStatus,
    LogChunk,
    MetricRow,
    Owner,
    TrainerImage,
)
from aviflow.spec import TrainJob

HERE = Path(__file__).resolve().parent
STALL = HERE / "stall"
CONTROLLER_DOWN = HERE / "controller-down"
STALLED = HERE / "stalled"
MAX_STALL = 60.0
_numbers = itertools.count()


def stall(method: str) -> None:
    """Wait while the ``stall`` switch is on (at most MAX_STALL seconds)."""
    if not STALL.exists():
        return
    STALLED.mkdir(exist_ok=True)
    mark = STALLED / f"{threading.current_thread().name}-{method}-{next(_numbers)}"
    mark.touch()
    try:
        deadline = time.monotonic() + MAX_STALL
        while STALL.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        mark.unlink()


class StallingBackend(LocalBackend):
    name = "stalling"

    def __init__(self) -> None:
        super().__init__(root=HERE / "runs", capacity=1)
        self._asked: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()
        self._controller: threading.Thread | None = None
        self._down = threading.Event()

    @classmethod
    def from_config(cls, section: Mapping[str, Any] | None = None) -> StallingBackend:
        return cls()

    def start(self) -> None:
        super().start()
        self._controller = threading.Thread(target=self._act, name="fake-controller", daemon=True)
        self._controller.start()

    def stop(self) -> None:
        self._down.set()
        super().stop()

    def _act(self) -> None:
        """The "controller": carries out the cancel requests while it is up."""
        while not self._down.wait(0.1):
            if CONTROLLER_DOWN.exists():
                continue
            with self._lock:
                asked, self._asked = self._asked, []
            for job_id, by in asked:
                super().request_cancel(job_id, by)

    # -- what aviflow-api calls ------------------------------------------------------------------
    def request_cancel(self, job_id: str, by: str | None = None) -> bool:
        stall("request_cancel")
        if self.run_dir(job_id).status().state.is_finished():
            return False
        with self._lock:
            self._asked.append((job_id, by))
        return True

    def submit(
        self,
        job: TrainJob,
        bundle: CodeBundle,
        owner: Owner | None = None,
        *,
        job_id: str | None = None,
    ) -> str:
        stall("submit")
        return super().submit(job, bundle, owner, job_id=job_id)

    def images(self) -> list[TrainerImage]:
        stall("images")
        return super().images()

    def status(self, job_id: str) -> JobStatus:
        stall("status")
        return super().status(job_id)

    def spec(self, job_id: str) -> TrainJob:
        stall("spec")
        return super().spec(job_id)

    def meta(self, job_id: str) -> JobMeta:
        stall("meta")
        return super().meta(job_id)

    def events(self, job_id: str, since: int = 0, limit: int | None = None) -> Batch[Event]:
        stall("events")
        return super().events(job_id, since, limit)

    def metrics(
        self,
        job_id: str,
        since: int = 0,
        after_step: int | None = None,
        limit: int | None = None,
    ) -> Batch[MetricRow]:
        stall("metrics")
        return super().metrics(job_id, since, after_step, limit)

    def ranks(self, job_id: str) -> list[int]:
        stall("ranks")
        return super().ranks(job_id)

    def log(
        self, job_id: str, rank: int, *, tail: int | None = None, offset: int | None = None
    ) -> LogChunk:
        stall("log")
        return super().log(job_id, rank, tail=tail, offset=offset)

    def checkpoints(self, job_id: str) -> list[CheckpointRef]:
        stall("checkpoints")
        return super().checkpoints(job_id)

    def failures(self, job_id: str) -> list[FailureInfo]:
        stall("failures")
        return super().failures(job_id)
