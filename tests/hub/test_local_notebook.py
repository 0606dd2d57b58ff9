"""The local hub spawns a real notebook: log in, spawn through the hub API, reach the server
through the proxy, run ``%load_ext aviflow`` and a ``%%aviflow_train`` cell in one of its
kernels (the job goes through aviflow-api with the notebook's own token into the user's team
queue and shows up in the usage ledger); then stop it and check that no process is left.
"""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest
import requests

pytestmark = pytest.mark.timeout(1200)

NOTEBOOK_CODE = """
import os
%load_ext aviflow
import aviflow
from aviflow.backends import get_backend
print("url", os.environ["AVIFLOW_API_URL"])
print("token", bool(os.environ.get("JUPYTERHUB_API_TOKEN")))
print("user", os.environ["JUPYTERHUB_USER"])
print("magic", "aviflow_train" in get_ipython().magics_manager.magics["cell"])
print("backend", type(get_backend()).__name__)
print("jobs", aviflow.jobs())
"""
TRAIN_CODE = """
%load_ext aviflow
get_ipython().run_cell_magic("aviflow_train", "--name hello --out job --wait",
                             "print('hello from the hub')")
print("state", job.status.value)
print("backend", type(job.backend).__name__)
print("queue", job.spec.spec.queue)
print("id", job.id)
print("hello" in job.logs())
"""


def _singleuser_processes(hub: Any) -> list[psutil.Process]:
    out = []
    for p in psutil.Process(hub.process.pid).children(recursive=True):
        try:
            cmd = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if "jupyterhub.singleuser" in cmd or "ipykernel" in cmd:
            out.append(p)
    return out


def test_a_user_logs_in_spawns_a_notebook_and_reaches_aviflow_api(
    hub_factory: Any, run_in_kernel: Any
) -> None:
    hub = hub_factory()
    browser = requests.Session()
    page = browser.get(f"{hub.url}/hub/login", timeout=60)
    r = browser.post(
        f"{hub.url}/hub/login",
        allow_redirects=False,
        timeout=60,
        data={
            "username": "alice",
            "password": "aviflow-test-pw",
            "_xsrf": hub.xsrf_from(page.text),
        },
    )
    assert r.status_code == 302, r.text
    token = hub.token("alice")

    server = hub.spawn("alice", token)
    assert server["url"] == "/user/alice/"
    running = _singleuser_processes(hub)
    assert len(running) == 1, running
    status = requests.get(
        f"{hub.url}/user/alice/api/status", timeout=60, headers={"Authorization": f"token {token}"}
    )
    assert status.status_code == 200, status.text
    assert set(status.json()) >= {"started", "last_activity", "kernels", "connections"}
    # The logged-in browser opens JupyterLab (the single-user server's OAuth with the hub).
    lab = browser.get(f"{hub.url}/user/alice/lab", timeout=120)
    assert lab.status_code == 200 and "JupyterLab" in lab.text, lab.url

    out, error = run_in_kernel(f"{hub.url}/user/alice/", token, NOTEBOOK_CODE)
    assert error is None, (error, out)
    api_port = hub.config()["api"]["port"]
    assert out.splitlines() == [
        f"url http://127.0.0.1:{api_port}/services/aviflow-api/",
        "token True",
        "user alice",
        "magic True",
        "backend HubBackend",
        "jobs []",
    ]

    out, error = run_in_kernel(f"{hub.url}/user/alice/", token, TRAIN_CODE, timeout=600)
    assert error is None, (error, out)
    lines = out.splitlines()
    job_id = lines[-2].removeprefix("id ")
    assert lines[-5:] == [
        "state SUCCEEDED",
        "backend HubBackend",
        "queue queue-a",
        f"id {job_id}",
        "True",
    ]
    job = hub.call("GET", f"jobs/{job_id}", token).json()
    assert (job["user"], job["team"], job["state"]) == ("alice", "team-a", "SUCCEEDED")
    deadline = time.monotonic() + 120  # the ledger ingests every second (ingestEvery)
    while not (rows := hub.call("GET", "usage?by=user", token).json()["rows"]):
        assert time.monotonic() < deadline, "the job never reached the usage ledger"
        time.sleep(1)
    assert [r["key"] for r in rows] == ["alice"]
    report = browser.get(f"{hub.url}/services/aviflow-api/report", timeout=120)
    assert (
        report.status_code == 200 and "GPU-hours by user" in report.text and "alice" in report.text
    )

    hub.stop_server("alice", token)
    _gone, alive = psutil.wait_procs(running, timeout=60)
    assert not alive, f"notebook processes left after stopping the server: {alive}"
    assert _singleuser_processes(hub) == []
    gone = requests.get(
        f"{hub.url}/user/alice/api/status",
        allow_redirects=False,
        timeout=60,
        headers={"Authorization": f"token {token}"},
    )
    assert gone.status_code in (302, 404, 424, 503), gone.status_code
