"""The controller's liveness: what ``/healthz`` says when a reconcile or the ticker hangs.

A leader whose reconciles hang keeps renewing its lease (the election has a thread of its
own), so only the kubelet's probe on ``/healthz`` can hand the work to the other replica.
These run the controller's own threads on a client that reaches no server: nothing here
needs one (the probe of a real controller process is in test_controller_ha.py)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import requests
from kubernetes import client

from aviflow.k8s.settings import ClusterSettings
from aviflow.operator import _health
from aviflow.operator._controller import Controller
from aviflow.operator._workqueue import WorkQueue
from aviflow.store import RunStore
from aviflow_testcluster import wait_for


def _controller(tmp_path: Path, tick: float) -> Controller:
    settings = ClusterSettings.from_dict({"image": "t:1", "runs": {"localPath": str(tmp_path)}})
    ctl = Controller(client.ApiClient(), settings, RunStore(tmp_path), workers=1, tick=tick)
    ctl._informers = []  # this one watches nothing: its queue is fed by hand
    return ctl


def test_a_hung_reconcile_makes_the_controller_unhealthy_until_it_returns(
    tmp_path: Path,
) -> None:
    ctl = _controller(tmp_path, tick=0.05)
    gate = threading.Event()
    began = threading.Event()

    def hang(key: str) -> None:
        began.set()
        gate.wait(30)

    ctl.reconcile = hang  # type: ignore[method-assign]
    assert ctl.health(0.2) == []  # not started (a candidate): healthy
    ctl.start()
    try:
        assert ctl.health(0.2) == []
        ctl.queue.put("team-a/stuck-1")
        assert began.wait(10)
        wait_for(lambda: ctl.health(0.2) != [], 10, "the hang is seen")
        [problem] = ctl.health(0.2)
        assert re.fullmatch(r"the reconcile of team-a/stuck-1 has run for \d+ s", problem)
        gate.set()
        wait_for(lambda: ctl.health(0.2) == [], 10, "healthy once it returned")
    finally:
        gate.set()
        ctl.stop()
    assert ctl.health(0.2) == []  # stopping: not a failure to report


def test_a_ticker_that_stopped_going_round_is_reported(tmp_path: Path) -> None:
    ctl = _controller(tmp_path, tick=0.05)
    ctl.start()
    try:
        assert ctl.health(5) == []
        ctl._ticked = time.monotonic() - 7  # as if its last round were 7 s ago
        found = ctl.health(5)
        # the live ticker may go round between the two lines: then it is healthy again
        assert found in ([], ["the ticker has not gone round for 7 s"]), found
        ctl.tick = 3600.0  # its next round is an hour away
        time.sleep(0.2)
        ctl._ticked = time.monotonic() - 7
        assert ctl.health(5) == ["the ticker has not gone round for 7 s"]
    finally:
        ctl.stop()


def test_the_queue_names_its_longest_reconcile() -> None:
    q = WorkQueue()
    assert q.longest_busy() is None
    q.put("a")
    q.put("b")
    assert q.take() == "a"
    time.sleep(0.05)
    assert q.take() == "b"
    job, seconds = q.longest_busy() or ("", 0.0)
    assert job == "a" and seconds >= 0.05
    q.done("a")
    assert (q.longest_busy() or ("",))[0] == "b"
    q.done("b")
    assert q.longest_busy() is None


def test_healthz_answers_ok_or_503_with_each_problem() -> None:
    problems: list[str] = []
    server = _health.serve(0, lambda: list(problems), host="127.0.0.1")
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        got = requests.get(f"{base}/healthz", timeout=10)
        assert (got.status_code, got.text) == (200, "ok\n")
        problems += ["the reconcile of a/b has run for 301 s", "informer pods has stopped"]
        got = requests.get(f"{base}/healthz", timeout=10)
        assert got.status_code == 503
        assert got.text == "the reconcile of a/b has run for 301 s\ninformer pods has stopped\n"
        assert requests.get(f"{base}/metrics", timeout=10).status_code == 404
    finally:
        server.shutdown()
        server.server_close()
