"""The panel's feed: a daemon thread that reads the job and hands snapshots to a sink.

At most ``max_updates_per_second`` snapshots leave per second (and never faster than one
per ``interval``); once the job has finished and everything it logged has been read (a
snapshot that is not ``catching_up``), one last snapshot is sent and the thread ends. Reads
are incremental (:class:`~aviflow.views.snapshot.SnapshotReader`).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from aviflow.errors import JobNotFound
from aviflow.job import Job
from aviflow.views.snapshot import JobSnapshot, SnapshotReader

MAX_BACKOFF = 10.0
_active: weakref.WeakSet[Poller] = weakref.WeakSet()


class Poller:
    def __init__(
        self,
        job: Job,
        sink: Callable[[JobSnapshot], None],
        on_error: Callable[[str], None] | None = None,
        interval: float = 1.0,
        max_updates_per_second: float = 2.0,
    ) -> None:
        if interval <= 0 or max_updates_per_second <= 0:
            raise ValueError("interval and max_updates_per_second must be positive")
        self.job = job
        self.sink = sink
        self.on_error = on_error or (lambda _m: None)
        self.period = max(interval, 1.0 / max_updates_per_second)
        self.updates = 0
        self.reader = SnapshotReader(job)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(
            target=self._run, name=f"aviflow-panel-{self.job.id}", daemon=True
        )
        _active.add(self)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def poll_once(self) -> JobSnapshot:
        snap = self.reader.read()
        self.sink(snap)
        self.updates += 1
        return snap

    def _run(self) -> None:
        delay = self.period
        while not self._stop.is_set():
            try:
                snap = self.poll_once()
                if snap.state.is_finished() and not snap.catching_up:
                    break
                delay = self.period
            except JobNotFound as exc:
                self.on_error(f"job is gone: {exc}")
                break
            except Exception as exc:  # keep the panel alive through transient read errors
                delay = min(MAX_BACKOFF, delay * 2)
                self.on_error(
                    f"update failed ({type(exc).__name__}: {exc}); retrying in {delay:.0f}s"
                )
            self._stop.wait(delay)
        _active.discard(self)


def stop_all() -> None:
    """Stop every running poller (``%unload_ext aviflow``)."""
    for poller in list(_active):
        poller.stop()
