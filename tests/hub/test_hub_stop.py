"""A real hub stops on SIGTERM (what Kubernetes and systemd send) cleanly and well within
Kubernetes' default 30 s grace period, and a running local job keeps running across the stop.

On SIGTERM JupyterHub stops each managed service with SIGINT and escalates to SIGTERM only after
``interrupt_timeout`` (30 s; not configurable for services). The hub here starts with SIGINT
ignored, as ``cmd &`` in a non-interactive shell starts it, and its services inherit that. Before
the fix the idle culler then ignored the hub's SIGINT: the hub waited ~30 s for it and its
service health check logged a traceback meanwhile. Now each service logs that it stopped on the
hub's first signal (SIGINT; no escalation) and the hub log has no traceback.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import psutil
import pytest

from aviflow import _procs, api
from aviflow.backends.hub import HubBackend
from aviflow.backends.local import LocalBackend

pytestmark = pytest.mark.timeout(900)

# Wide for a loaded 2-core CI machine (a stop takes ~2 s on an idle one), below the 30 s grace
# period and the >= 30 s the old stop took; the log assertions pin what happened.
STOP_BOUND = 25.0
TICKER = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "ticker"},
    "spec": {
        "script": "import time\nwhile True:\n    print('tick', flush=True)\n    time.sleep(0.2)\n",
        "queue": "queue-a",
    },
}
ROLES = {
    "configurable-http-proxy": "proxy",
    "aviflow_hub.service": "aviflow-api",
    "culler": "idle-culler",
}  # aviflow_hub.culler (before: jupyterhub_idle_culler)


def _role(proc: psutil.Process) -> str:
    cmd = " ".join(proc.cmdline())
    return next((role for key, role in ROLES.items() if key in cmd), cmd)


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stop_and_time(hub: Any, timeout: float = 120) -> dict[str, float]:
    """SIGTERM the hub; seconds until each of its processes was gone (missing: still alive)."""
    family = {p: _role(p) for p in psutil.Process(hub.process.pid).children(recursive=True)}
    assert sorted(family.values()) == ["aviflow-api", "idle-culler", "proxy"], family
    gone: dict[str, float] = {}
    start = time.monotonic()
    hub.process.send_signal(signal.SIGTERM)
    while len(gone) < len(family) + 1 and time.monotonic() - start < timeout:
        if "hub" not in gone and hub.process.poll() is not None:
            gone["hub"] = time.monotonic() - start
        for proc, role in family.items():
            if role not in gone and _gone(proc):
                gone[role] = time.monotonic() - start
        time.sleep(0.05)
    return gone


def test_sigterm_stops_every_hub_process_promptly_and_jobs_keep_running(
    hub_factory: Any, stop_jobs: Any
) -> None:
    hub = hub_factory(ignore_sigint=True)
    token = hub.token("alice")
    job_id = api.submit(
        TICKER, backend=HubBackend(f"{hub.url}/services/aviflow-api/", token=token)
    ).id
    local = LocalBackend(root=hub.run_root, capacity=1)
    try:
        deadline = time.monotonic() + 300
        while not (
            local.status(job_id).state == "RUNNING" and local.run_dir(job_id).rank_log(0).exists()
        ):
            assert time.monotonic() < deadline, local.status(job_id)
            time.sleep(0.5)
        job_pids = {p.pid for p in _procs.tagged(job_id)}
        assert job_pids

        gone = _stop_and_time(hub)

        assert set(gone) == {"hub", "proxy", "aviflow-api", "idle-culler"}, f"still running: {gone}"
        assert max(gone.values()) < STOP_BOUND, gone
        assert hub.process.returncode == 0
        log = hub.log()
        stopping = log[log.index("Received signal SIGTERM") :]
        # Each service ended on the hub's first signal, before any escalation to SIGTERM/SIGKILL.
        assert (
            "aviflow-api stopping on SIGINT" in stopping
            and "idle-culler stopping on SIGINT" in stopping
        )
        assert "stopping on SIGTERM" not in stopping
        assert "...done" in stopping
        assert "Traceback" not in log, log[-6000:]

        # The job is no hub process: its supervisor and processes run on, and so does its output.
        size = local.run_dir(job_id).rank_log(0).stat().st_size
        time.sleep(2)
        assert job_pids <= {p.pid for p in _procs.tagged(job_id)}
        assert local.status(job_id).state == "RUNNING"
        assert local.run_dir(job_id).rank_log(0).stat().st_size > size
    finally:
        stray = stop_jobs(hub.run_root)
    assert not stray, f"the job left processes behind: {stray}"
