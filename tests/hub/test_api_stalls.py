"""Nothing blocks aviflow-api's shared workers: a backend that stalls, a controller that is down
or a Kubernetes API server that stops answering holds only the requests that need it.

Two real hubs. One runs aviflow-api on ``stalling`` (``aviflow_stalling_backend.py``: a local
backend whose calls wait while a switch is on, and whose "controller" can be down), installed
the way a third-party backend is: an ``aviflow.backends`` entry point on the service's
``PYTHONPATH``. The other runs it on the kubernetes backend, its kubeconfig pointing at a TCP
server that accepts connections and never answers. Bounds on time are generous ("did not
hang"): the stalls last a minute, the answers must come within :data:`PROMPT` seconds.
"""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from aviflow import api
from aviflow.backends.hub import HubBackend
from aviflow.bundle import build_bundle
from aviflow.lifecycle import Lifecycle, Policy
from aviflow.spec import TrainJob
from aviflow.store import RunStore

pytestmark = pytest.mark.timeout(600)

HERE = Path(__file__).resolve().parent
ADMIN_PASSWORD = "aviflow-test-admin-password-0123456789"  # conftest's base_config
PROMPT = 10.0  # seconds: an answer that does not wait on the stalled backend comes sooner
SLEEPER = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "sleeper"},
    "spec": {"command": ["python", "-c", "import time; time.sleep(600)"], "queue": "queue-a"},
}
BUSY_READS = (
    "aviflow-api is busy reading jobs from the backend: all 8 of its workers for that are still "
    "in earlier calls, none was free within 2 s; try again in 5 s"
)
BUSY_WRITES = (
    "aviflow-api is busy submitting or cancelling jobs: all 4 of its workers for that are still "
    "in earlier calls, none was free within 2 s; try again in 5 s"
)


def busy_for(user: str, what: str, share: int, workers: int) -> str:
    return (
        f"aviflow-api is busy {what} for {user}: {share} calls of yours are still running (one "
        f"user may hold {share} of its {workers} workers for that), none ended within 2 s; try "
        "again in 5 s"
    )


def timed(fn: Callable[[], requests.Response]) -> tuple[requests.Response, float]:
    start = time.monotonic()
    r = fn()
    return r, time.monotonic() - start


def error(status: int, cls: str, message: str) -> dict[str, Any]:
    return {"status": status, "error": cls, "message": message, "problems": [message]}


# -- a hub on the stalling backend -----------------------------------------------------------------


class Stalling:
    """The stalling backend's directory: its switches, its run store, what is waiting."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def switch(self, name: str, on: bool) -> None:
        path = self.dir / name
        if on:
            path.touch()
        else:
            path.unlink(missing_ok=True)

    def waiting(self, lane: str) -> list[str]:
        """The stalled calls of one of aviflow-api's lanes (by their threads' names)."""
        stalled = self.dir / "stalled"
        found = [p.name for p in stalled.iterdir()] if stalled.is_dir() else []
        return sorted(n for n in found if n.startswith(f"aviflow-api-{lane}_"))


@pytest.fixture(scope="module")
def stalling_hub(
    module_hub_factory: Callable[..., Any],
    hub_config: Callable[..., dict[str, Any]],
    stop_jobs: Callable[[Path], list[str]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, Stalling, dict[str, str]]]:
    directory = tmp_path_factory.mktemp("stalling")
    shutil.copy(HERE / "aviflow_stalling_backend.py", directory)
    info = directory / "aviflow_stalling_backend-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: aviflow-stalling-backend\n")
    (info / "entry_points.txt").write_text(
        "[aviflow.backends]\nstalling = aviflow_stalling_backend:StallingBackend\n"
    )
    cfg = hub_config()
    cfg["api"] = {**cfg["api"], "backend": "stalling"}
    cfg["api"].pop("local")
    path = os.pathsep.join(p for p in (str(directory), os.environ.get("PYTHONPATH")) if p)
    hub = module_hub_factory(cfg, env={"PYTHONPATH": path})
    # alice's job is lead's team's (lead administers it) and any job is root's (hub admin)
    tokens = {name: hub.token(name) for name in ("alice", "lead")}
    tokens["root"] = hub.token("root", password=ADMIN_PASSWORD)
    try:
        yield hub, Stalling(directory), tokens
    finally:
        Stalling(directory).switch("stall", False)
        stray = stop_jobs(directory / "runs")
        assert not stray, f"jobs left processes behind: {stray}"


def submit(hub: Any, token: str, name: str) -> str:
    backend = HubBackend(f"{hub.url}/services/aviflow-api/", token=token)
    return api.submit({**SLEEPER, "metadata": {"name": name}}, backend=backend).id


def state(hub: Any, token: str, job_id: str) -> str:
    r = hub.call("GET", f"jobs/{job_id}/status", token)
    assert r.status_code == 200, r.text
    return str(r.json()["state"])


def test_cancels_answer_at_once_while_the_controller_is_down_and_the_jobs_end_after(
    stalling_hub: Any,
) -> None:
    hub, stalling, tokens = stalling_hub
    alice = tokens["alice"]
    running, queued = submit(hub, alice, "running"), submit(hub, alice, "queued")
    hub.until(lambda: state(hub, alice, running) == "RUNNING", "the first job runs", 120)
    assert state(hub, alice, queued) == "QUEUED"  # one GPU slot
    stalling.switch("controller-down", True)
    targets = [running, queued] * 4
    with ThreadPoolExecutor(len(targets)) as pool:
        futures = [
            pool.submit(timed, lambda j=j: hub.call("POST", f"jobs/{j}/cancel", alice, json={}))
            for j in targets
        ]
        answers = [f.result() for f in futures]
    for job_id, (r, took) in zip(targets, answers, strict=True):
        expected = "RUNNING" if job_id == running else "QUEUED"
        assert (r.status_code, r.json()) == (
            202,
            {"id": job_id, "cancelled": True, "state": expected},
        )
        assert took < PROMPT, took
    queues, took = timed(lambda: hub.call("GET", "queues", alice))
    assert queues.status_code == 200 and took < PROMPT
    # nothing acted on the requests: the jobs go on
    assert (state(hub, alice, running), state(hub, alice, queued)) == ("RUNNING", "QUEUED")
    # the Python client's cancel asks, then reads the status until the end
    client = HubBackend(f"{hub.url}/services/aviflow-api/", token=alice)
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(client.cancel, running)
        time.sleep(2)
        assert not waiting.done()  # the controller is down
        stalling.switch("controller-down", False)
        assert waiting.result(timeout=120) is True
    assert state(hub, alice, running) == "CANCELLED"
    for job_id in (running, queued):
        hub.until(lambda j=job_id: state(hub, alice, j) == "CANCELLED", f"{job_id} ends", 120)
        events = hub.call("GET", f"jobs/{job_id}/events", alice).json()["events"]
        assert (events[-1]["type"], events[-1]["message"]) == ("CANCELLED", "cancelled by alice")
        again = hub.call("POST", f"jobs/{job_id}/cancel", alice, json={})
        assert (again.status_code, again.json()) == (
            200,
            {"id": job_id, "cancelled": False, "state": "CANCELLED"},
        )

    def listed() -> bool:
        rows = hub.call("GET", "jobs", alice).json()["jobs"]
        return {r["id"]: r["state"] for r in rows if r["id"] in (running, queued)} == {
            running: "CANCELLED",
            queued: "CANCELLED",
        }

    hub.until(listed, "the ledger lists both jobs as cancelled")


def test_a_stalled_backend_holds_only_the_requests_that_need_it(stalling_hub: Any) -> None:
    hub, stalling, tokens = stalling_hub
    alice = tokens["alice"]
    job_id = submit(hub, alice, "stalled")
    hub.until(lambda: state(hub, alice, job_id) == "RUNNING", "the job runs", 120)
    hub.until(
        lambda: (
            [r["state"] for r in hub.call("GET", "jobs", alice).json()["jobs"]].count("RUNNING")
            == 1
        ),
        "the ledger has the job running",
    )
    stalling.switch("controller-down", True)  # so the cancels, once through, find it running
    stalling.switch("stall", True)
    pool = ThreadPoolExecutor(12)
    try:
        # alice and lead each hold their half of the reads' 8 workers and of the writes' 4
        reads: list[Future[requests.Response]] = [
            pool.submit(hub.call, "GET", f"jobs/{job_id}/status", tokens[who])
            for who in ("alice", "lead")
            for _ in range(4)
        ]
        hub.until(lambda: len(stalling.waiting("reads")) == 8, "8 stalled reads")
        cancels: list[Future[requests.Response]] = [
            pool.submit(hub.call, "POST", f"jobs/{job_id}/cancel", tokens[who], json={})
            for who in ("alice", "lead")
            for _ in range(2)
        ]
        hub.until(lambda: len(stalling.waiting("writes")) == 4, "4 stalled cancels")
        assert not any(f.done() for f in reads + cancels)
        # alice's next read waits for one of hers, lead's share is his: refused, saying so
        r, took = timed(lambda: hub.call("GET", f"jobs/{job_id}/events", alice))
        assert (r.status_code, r.json(), r.headers["Retry-After"]) == (
            503,
            error(
                503, "BackendUnavailable", busy_for("alice", "reading jobs from the backend", 4, 8)
            ),
            "5",
        )
        assert took < PROMPT
        # every worker for reads and for writes is held: anyone's are refused after the wait
        for path in (f"jobs/{job_id}/events", f"jobs/{job_id}", f"jobs/{job_id}/logs/0"):
            r, took = timed(lambda p=path: hub.call("GET", p, tokens["root"]))
            assert (r.status_code, r.json()) == (
                503,
                error(503, "BackendUnavailable", BUSY_READS),
            )
            assert r.headers["Retry-After"] == "5" and took < PROMPT
        r, took = timed(lambda: hub.call("POST", f"jobs/{job_id}/cancel", alice, json={}))
        assert (r.status_code, r.json(), r.headers["Retry-After"]) == (
            503,
            error(
                503, "BackendUnavailable", busy_for("alice", "submitting or cancelling jobs", 2, 4)
            ),
            "5",
        )
        assert took < PROMPT
        r, took = timed(lambda: hub.call("POST", f"jobs/{job_id}/cancel", tokens["root"], json={}))
        assert (r.status_code, r.json(), r.headers["Retry-After"]) == (
            503,
            error(503, "BackendUnavailable", BUSY_WRITES),
            "5",
        )
        assert took < PROMPT
        # ... and what needs only the ledger answers
        for path in ("jobs", "queues", "usage?by=user", "usage?by=attempt&format=csv"):
            r, took = timed(lambda p=path: hub.call("GET", p, alice))
            assert r.status_code == 200 and took < PROMPT, (path, r.status_code, took)
        listed = hub.call("GET", "jobs", alice).json()["jobs"]
        assert [(j["id"], j["state"]) for j in listed if j["id"] == job_id] == [(job_id, "RUNNING")]
        for page in ("", "report"):
            r, took = timed(lambda p=page: hub.page(p, alice))
            assert r.status_code == 200 and took < PROMPT, (page, r.status_code, took)
        assert not any(f.done() for f in reads + cancels)  # still stalled
        stalling.switch("stall", False)
        for f in reads:
            r = f.result(timeout=120)
            assert r.status_code == 200 and r.json()["state"] == "RUNNING", r.text
        for f in cancels:
            r = f.result(timeout=120)
            assert (r.status_code, r.json()) == (
                202,
                {"id": job_id, "cancelled": True, "state": "RUNNING"},
            )
    finally:
        stalling.switch("stall", False)
        pool.shutdown(wait=True)
    stalling.switch("controller-down", False)
    hub.until(lambda: state(hub, alice, job_id) == "CANCELLED", "the job ends", 120)


# -- a hub on the kubernetes backend, its API server silent ------------------------------------


class SilentServer:
    """A TCP server that accepts connections and never answers (an API server that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for c in self.conns:
            c.close()


@pytest.fixture(scope="module")
def silent_cluster_hub(
    module_hub_factory: Callable[..., Any],
    hub_config: Callable[..., dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Any, SilentServer, dict[str, str]]]:
    server = SilentServer()
    kubeconfig = tmp_path_factory.mktemp("kube") / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "silent",
                "clusters": [
                    {"name": "silent", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}
                ],
                "contexts": [{"name": "silent", "context": {"cluster": "silent", "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    cfg = hub_config()
    cfg["api"] = {**cfg["api"], "backend": "kubernetes"}
    cfg["api"].pop("local")
    cfg["api"]["kubernetes"] = {
        "kubeconfig": str(kubeconfig),
        "image": "trainer:1",
        "apiTimeout": {"connect": 2, "read": 3},
    }
    hub = module_hub_factory(cfg)
    try:
        yield hub, server, {name: hub.token(name) for name in ("alice", "lead")}
    finally:
        server.close()


def silent(port: int, what: str) -> str:
    return (
        f"{what}: the Kubernetes API server at http://127.0.0.1:{port} did not answer within 3 s "
        "(ReadTimeoutError); try again in a minute. If it goes on, ask an admin to check the API "
        "server and the network to it (the kubernetes settings' apiTimeout: how long a call may "
        "wait)"
    )


def test_a_silent_api_server_is_a_503_saying_so_and_holds_nothing_else(
    silent_cluster_hub: Any,
) -> None:
    hub, server, tokens = silent_cluster_hub
    alice = tokens["alice"]
    r, took = timed(lambda: hub.call("POST", "jobs", alice, json={"spec": SLEEPER}))
    run_root = hub.run_root
    # the create was sent (twice): its TrainJob may exist, so its directory stays, pending
    [left] = RunStore(run_root).ids()
    unsure = (
        f" Job {left} is recorded, and its TrainJob may have been created: the controller takes "
        "it up if it was, and marks it failed ('the submission did not complete') after its "
        "grace period if it was not. Submitting again with the same Idempotency-Key "
        "(aviflow-api) settles it at once."
    )
    said = error(503, "BackendUnavailable", silent(server.port, "submitting 'sleeper'") + unsure)
    said["problems"] = [said["message"][:500]]  # a problem is cut to 500 characters
    assert (r.status_code, r.json(), r.headers["Retry-After"]) == (503, said, "5")
    assert took < 2 * 3 + PROMPT
    assert [i for i, _ in RunStore(run_root).pending()] == [left]
    # a job of alice's that the API server has (its directory, as submit writes it)
    job = TrainJob.from_dict({**SLEEPER, "metadata": {"name": "there"}})
    run = RunStore(run_root).create(
        job,
        build_bundle(job).store_files(),
        "alice",
        team="team-a",
        backend="kubernetes",
        origin={"namespace": "aviflow"},
    )
    step = Lifecycle(Policy.from_spec(job.spec)).submitted(time.time(), "waiting")
    run.record(step.events, step.lifecycle.status())
    hub.until(
        lambda: any(j["id"] == run.id for j in hub.call("GET", "jobs", alice).json()["jobs"]),
        "the ledger has the job",
    )
    with ThreadPoolExecutor(4) as pool:
        cancels = [  # alice's and her team admin's: each within the half of the lane one may hold
            pool.submit(
                timed, lambda t=tokens[who]: hub.call("POST", f"jobs/{run.id}/cancel", t, json={})
            )
            for who in ("alice", "alice", "lead", "lead")
        ]
        # while the cancels wait on the API server, the ledger and the run store answer
        for path in ("jobs", "queues", "usage?by=team", f"jobs/{run.id}/status"):
            r, took = timed(lambda p=path: hub.call("GET", p, alice))
            assert r.status_code == 200 and took < PROMPT, (path, r.status_code, took)
        for f in cancels:
            r, took = f.result()
            assert (r.status_code, r.json(), r.headers["Retry-After"]) == (
                503,
                error(503, "BackendUnavailable", silent(server.port, f"cancel of {run.id}")),
                "5",
            )
            assert took < 3 * 2 + PROMPT  # its own timeout, behind at most one other's
    assert run.status().state.value == "QUEUED"  # nothing changed
    assert len(server.conns) >= 2  # the calls did reach it
