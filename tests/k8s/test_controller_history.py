"""Finished TrainJobs cost the controller neither a tick nor a resync (issue 24; measured on
the test control plane by ``bench/controller_history.py``). These run the controller's own
ticker on a client that reaches no server, its TrainJob cache filled by hand."""

from __future__ import annotations

import doctest
import threading
from pathlib import Path
from typing import Any

from kubernetes import client

from aviflow.k8s.settings import ClusterSettings
from aviflow.operator import _cell
from aviflow.operator._cell import ACTIVE, trim
from aviflow.operator._controller import Controller
from aviflow.store import RunStore
from aviflow_testcluster import wait_for


def trainjob(name: str, state: str | None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": name, "uid": f"u-{name}", "generation": 1},
        "spec": {"queue": "q", "command": ["true"]},
        "status": {"state": state} if state else {},
    }


def ticked(ctl: Controller, n: int) -> None:
    """Run the controller's ticker until ``n`` jobs wait in its queue, then stop it."""
    ticker = threading.Thread(target=ctl._tick_loop, daemon=True)
    ticker.start()
    try:
        wait_for(lambda: len(ctl.queue.waiting) >= n, 10, "a tick")
    finally:
        ctl._stop.set()
        ticker.join(10)


def test_the_ticker_queues_the_trainjobs_not_finished_only(tmp_path: Path) -> None:
    settings = ClusterSettings.from_dict({"namespace": "ns", "runs": {"localPath": str(tmp_path)}})
    ctl = Controller(client.ApiClient(), settings, RunStore(tmp_path), tick=0.01, queued_tick=0.01)
    cache = ctl.cells["ns"].trainjobs
    states = ["SUCCEEDED", "FAILED", "CANCELLED"]
    for i in range(3000):
        cache._put(("ns", f"done-{i}"), trim(trainjob(f"done-{i}", states[i % 3])))
    for name, state in (("running", "RUNNING"), ("queued", "QUEUED"), ("new", None)):
        cache._put(("ns", name), trim(trainjob(name, state)))
    assert sorted(o["metadata"]["name"] for o in cache.by(ACTIVE)) == ["new", "queued", "running"]
    ticked(ctl, 3)
    assert set(ctl.queue.waiting) == {"ns/running", "ns/queued", "ns/new"}
    for obj in cache.items():  # a resync's hand-back of a finished one queues nothing either
        if obj["metadata"]["name"].startswith("done-"):
            ctl._on_trainjob(obj)
    assert set(ctl.queue.waiting) == {"ns/running", "ns/queued", "ns/new"}


def test_the_cell_examples_run() -> None:
    assert doctest.testmod(_cell).failed == 0  # trim


def test_the_ticker_reconciles_a_job_with_no_status_every_tick(tmp_path: Path) -> None:
    """A new job's first status patch waits (``first_status``,
    tests/core/test_controller_admission.py): the next tick after the wait makes it, not the
    next ``queued_tick`` (the ticker's round for the queued ones)."""
    settings = ClusterSettings.from_dict({"namespace": "ns", "runs": {"localPath": str(tmp_path)}})
    ctl = Controller(client.ApiClient(), settings, RunStore(tmp_path), tick=0.01, queued_tick=3600)
    for name, state in (("new", None), ("queued", "QUEUED"), ("running", "RUNNING")):
        ctl.cells["ns"].trainjobs._put(("ns", name), trim(trainjob(name, state)))
    ticked(ctl, 2)
    assert sorted(ctl.queue.waiting) == ["ns/new", "ns/running"]
