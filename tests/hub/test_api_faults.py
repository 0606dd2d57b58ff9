"""aviflow-api and the hub killed (``kill -9``) mid-flight, on the test control plane (issue
24, item 6; the controller, Kueue, kube-apiserver and etcd are ``tests/k8s/test_faults.py``).

As the chart runs them: aviflow-api a process of its own (``api.external``, its Deployment),
the hub another (the proxy its child here). Three jobs are in flight through aviflow-api --
one running, one whose rank is killed while aviflow-api is down (it restarts), one queued
beyond its team's quota -- and bob's client submits a job every second or so meanwhile. Then:

1. aviflow-api is killed; it starts again in a wrapper that kills it (SIGKILL) in the middle
   of its first ingest, the catch-up of every unfinished job (``aviflow_dying_ingest.py``:
   one job's change committed, the next one's half written); then it starts again as
   ``python -m aviflow_hub.service`` with the same config, as its pod would.
2. The hub is killed, and started again with the same config.

Afterwards: every job has the events it would have had; the ledger holds each job once, in
its final state, and its attempt rows are exactly a recount from the run store's events
(every GPU-second attributed, none twice); a submission the client saw answered made one job,
one whose answer was lost made one or none. One cut off between its directory and its
TrainJob (aviflow-api killed with the request in its hands, the client's tries all spent
while it was down) stays pending until the controller's grace period; the controller's sweep,
run as at that time, fails it ("the submission did not complete").
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from trainjob_kit import launcher_process, tiny

from aviflow import api
from aviflow.attempts import attempts_from_events, job_info
from aviflow.backends.hub import HubBackend
from aviflow.errors import AviflowError
from aviflow.job import Job
from aviflow.operator._orphans import SUBMISSION_GRACE
from aviflow.records import EventType, JobState
from aviflow.spec import TrainJob
from aviflow_hub.config import load_config
from aviflow_hub.ledger import Ledger
from aviflow_hub.settings import external_service_environment
from aviflow_testcluster import wait_for

from .conftest import Hub, base_config, start_hub, stop_hub, write_config

pytestmark = pytest.mark.timeout(900)

E = EventType
ONCE = [E.QUEUED, E.STARTING, E.RUNNING]
DYING = Path(__file__).with_name("aviflow_dying_ingest.py")
SLOW = {"TINY_STEP_SLEEP": "0.3", "TINY_CKPT_EVERY": "10"}
STRANDED = "the submission did not complete: its TrainJob was never created (none named "


class _Api:
    """aviflow-api as its own process (the chart's Deployment): ``start(argv)`` runs it
    with the hub's service environment; ``kill9`` kills it."""

    def __init__(self, work: Path, config: Path, token: str) -> None:
        cfg = load_config(config)
        hub_url = f"http://127.0.0.1:{cfg.hub.hub_port}"
        self.env = {
            **os.environ,
            **external_service_environment(cfg, hub_url, cfg.api_url),
            "JUPYTERHUB_API_TOKEN": token,
        }
        self.work, self.config = work, config
        self.proc: subprocess.Popen[bytes] | None = None
        self.runs = 0

    def start(self, argv: list[str]) -> subprocess.Popen[bytes]:
        self.runs += 1
        with (self.work / f"api-{self.runs}.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *argv, "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        return self.proc

    def product(self) -> subprocess.Popen[bytes]:
        return self.start(["-m", "aviflow_hub.service"])

    def log(self, n: int) -> str:
        return (self.work / f"api-{n}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "".join(f"--- api {n}\n{self.log(n)[-3000:]}" for n in range(1, self.runs + 1))

    def kill9(self) -> int:
        assert self.proc is not None and self.proc.poll() is None, self.logs()
        os.kill(self.proc.pid, signal.SIGKILL)
        return self.proc.wait(30)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class _Submitter(threading.Thread):
    """bob's notebook submitting a short job every second or so through the hub (the client
    sends an Idempotency-Key and tries three times); what each call said is kept."""

    def __init__(self, client: HubBackend) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.said: dict[str, str | None] = {}  # name -> job id, or None: the call failed
        self.errors: dict[str, str] = {}
        self._halt = threading.Event()

    def run(self) -> None:
        n = 0
        while not self._halt.is_set():
            n += 1
            name = f"burst-{n}"
            spec = {
                "metadata": {"name": name},
                "spec": {"queue": "queue-b", "nodes": 1, "gpusPerNode": 1,
                         "command": ["sleep", "1"]},
            }  # fmt: skip
            try:
                self.said[name] = api.submit(TrainJob.from_dict(spec), self.client).id
            except (AviflowError, OSError) as exc:
                self.said[name] = None
                self.errors[name] = f"{type(exc).__name__}: {exc}"
            self._halt.wait(1.0)

    def stop(self) -> None:
        self._halt.set()
        self.join(60)


def _tiny(name: str, steps: int, **spec: Any) -> TrainJob:
    return tiny(name, "queue-a", nodes=1, gpus=1, env={**SLOW, "TINY_STEPS": str(steps)}, **spec)


@pytest.fixture
def hub_dir() -> Iterator[Path]:
    directory = Path(tempfile.mkdtemp(prefix="aviflow-hub-"))
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.cluster
def test_killing_aviflow_api_and_the_hub_mid_flight_loses_and_duplicates_nothing(
    make_pool: Any, hub_dir: Path, trainer_images: list[dict[str, Any]]
) -> None:
    pool = make_pool({"queue-a": {"gpus": 2}, "queue-b": {"gpus": 4}})
    base = base_config()
    cfg = base_config(
        hub={**base["hub"], "dataDir": str(hub_dir / "state")},
        api={
            **base["api"],
            "external": True,
            "backend": "kubernetes",
            "runRoot": str(pool.root),
            "database": f"sqlite:///{hub_dir / 'ledger.sqlite'}",
            "kubernetes": {
                "namespace": pool.namespace,
                "kubeconfig": str(pool.cluster.kubeconfig),
                "images": trainer_images,
            },
        },
    )
    del cfg["api"]["local"]
    token = secrets.token_hex(32)
    hub_env = {"AVIFLOW_API_TOKEN": token, "KUBECONFIG": str(pool.cluster.kubeconfig)}
    config = write_config(hub_dir, cfg)
    api_proc = _Api(hub_dir, config, token)
    api_proc.product()
    hub = start_hub(hub_dir, cfg, env=hub_env)
    submitter: _Submitter | None = None
    orphans: list[psutil.Process] = []  # the killed hub's children (its idle culler)
    try:
        alice = HubBackend(f"{hub.url}/services/aviflow-api/", token=hub.token("alice"))
        bob = HubBackend(f"{hub.url}/services/aviflow-api/", token=hub.token("bob"))
        ids = {
            "steady": api.submit(_tiny("steady", 90), alice).id,
            "restarts": api.submit(_tiny("restarts", 60, maxRestarts=1), alice).id,
        }
        jobs = {name: Job(job_id, pool.backend) for name, job_id in ids.items()}
        wait_for(
            lambda: (
                all(j.status is JobState.RUNNING for j in jobs.values())
                and any(c.step >= 10 for c in jobs["restarts"].checkpoints())
            ),
            240,
            lambda: f"two jobs running, one with a checkpoint: {_said(jobs)}",
        )
        # beyond team a's quota (its two GPUs are held): queued
        queued = api.submit(_tiny("queued", 20), alice).id
        jobs["queued"] = Job(queued, pool.backend)
        wait_for(
            lambda: jobs["queued"].status_record().queue_position == 1,
            60,
            lambda: f"queued at position 1: {jobs['queued'].status_record()}",
        )
        submitter = _Submitter(bob)
        submitter.start()
        wait_for(lambda: len(submitter.said) >= 2, 60, "bob's first submissions")

        # 1. aviflow-api killed; a node's launcher dies while it is down (the job restarts unseen)
        assert api_proc.kill9() == -signal.SIGKILL
        restarts = jobs["restarts"]
        run_dir = (
            f"/aviflow/runs/{pool.backend.run_dir(restarts.id).path.parent.name}/{restarts.id}"
        )
        wait_for(lambda: launcher_process(run_dir), 30, "its launcher").kill()
        wait_for(lambda: E.RESTARTING in _kinds(restarts), 120, lambda: _said(jobs))
        # it starts again and dies in its catch-up, one job committed, the next half written
        dying = api_proc.start([str(DYING)])
        assert dying.wait(120) == -signal.SIGKILL, api_proc.logs()
        assert "dying mid-batch after 2 changes" in api_proc.log(api_proc.runs)
        api_proc.product()  # as its pod would: the same config, a new process
        wait_for(
            lambda: _answers(hub.url), 60, lambda: f"aviflow-api answers again: {api_proc.logs()}"
        )
        # 2. the hub killed (its process: the proxy, its child, is left to the next hub)
        orphans += psutil.Process(hub.process.pid).children(recursive=True)
        os.kill(hub.process.pid, signal.SIGKILL)
        assert hub.process.wait(30) == -signal.SIGKILL
        time.sleep(2)
        hub = start_hub(hub_dir, cfg, env=hub_env)
        n = len(submitter.said)
        wait_for(lambda: len(submitter.said) >= n + 2, 60, "bob's submissions after the hub")
        submitter.stop()

        for name, job in jobs.items():
            assert job.wait(timeout=300) is JobState.SUCCEEDED, (name, _said(jobs))
        # a submission cut off between its directory and its TrainJob (aviflow-api killed,
        # or killing itself, with bob's request in its hands; the client gave up) stays
        # pending until the controller's grace period: its sweep, as one would then, fails it
        stranded = pool.controller.submissions.sweep(time.time() + SUBMISSION_GRACE)
        every = {j: Job(j, pool.backend) for j in pool.backend.list_ids()}
        for job in every.values():
            if job.id in stranded:
                assert job.spec.metadata.name in submitter.errors, (job.id, submitter.said)
                status = job.status_record()
                assert status.state is JobState.FAILED, (job.id, status)
                assert status.message.startswith(STRANDED), (job.id, status)
            else:
                assert job.wait(timeout=120) is JobState.SUCCEEDED, (job.id, job.events())
        assert api_proc.proc is not None and api_proc.proc.poll() is None, api_proc.logs()
        # the ledger follows (aviflow-api reads the change feed every second)
        ended = {j.id: j.status for j in every.values()}
        ledger = Ledger(cfg["api"]["database"])
        wait_for(
            lambda: {s.id: s.state for s in ledger.summaries()} == ended,
            60,
            lambda: (
                f"the ledger has every job in its state: {ledger.summaries()} {ended}; "
                f"aviflow-api: {api_proc.logs()[-6000:]}"
            ),
        )
    finally:  # each step whatever the one before did: no process outlives the test
        try:
            if submitter is not None:
                submitter.stop()
        finally:
            try:
                stop_hub(hub.process)
            finally:
                api_proc.close()
                for proc in psutil.wait_procs(orphans, timeout=0)[1]:
                    proc.kill()

    # no job lost or made twice: each answered submission is one job, a lost answer one or none
    everything = {Job(j, pool.backend) for j in pool.backend.list_ids()}
    by_name: dict[str, list[str]] = {}
    for job in everything:
        by_name.setdefault(job.spec.metadata.name, []).append(job.id)
    assert {by_name[n][0] for n in ("steady", "restarts", "queued")} == {
        j.id for j in jobs.values()
    }
    for name, said in submitter.said.items():
        made = by_name.pop(name, [])
        if said is not None:
            assert made == [said], (name, made, said)
        else:
            assert len(made) <= 1, (name, made, submitter.errors[name])
    assert set(by_name) == {"steady", "restarts", "queued"}, by_name
    print(f"bob's submissions: {submitter.said}; failed: {submitter.errors}", file=sys.stderr)
    # a call that failed was tried three times, each answered 503 (or not at all): aviflow-api
    # down, or the hub that checks bob's token
    assert all(e.startswith("BackendUnavailable") for e in submitter.errors.values()), (
        submitter.errors
    )
    # exactly the events each job would have had
    expected = {"steady": [*ONCE, E.SUCCEEDED], "restarts": [*ONCE, E.RESTARTING, *ONCE,
                E.SUCCEEDED], "queued": [*ONCE, E.SUCCEEDED]}  # fmt: skip
    assert {n: _kinds(j) for n, j in jobs.items()} == expected, _said(jobs)
    # the ledger: every job once, in its state, its attempts a recount of its events
    try:
        attempts = ledger.attempts()
        for job in everything:
            recount = attempts_from_events(job_info(job.meta, job.spec), job.events())
            assert [a for a in attempts if a.job_id == job.id] == recount, job.id
        assert len(attempts) == sum(_kinds(j).count(E.STARTING) for j in everything)
    finally:
        ledger.close()


def test_while_the_hub_is_away_aviflow_api_answers_503_so_clients_try_again(
    hub_factory: Any,
) -> None:
    """The hub killed (its pod restarts), aviflow-api and the proxy still up: a token aviflow-api
    has not seen cannot be checked. That is a 503 with Retry-After, which the client tries
    again (a 500 before: JupyterHub's 'Failed to connect to Hub API', and a submission
    failed at once)."""
    hub: Hub = hub_factory()
    bob = hub.token("bob")  # never shown to aviflow-api: not in its cache
    family = psutil.Process(hub.process.pid).children(recursive=True)
    os.kill(hub.process.pid, signal.SIGKILL)
    hub.process.wait(30)
    try:
        for path in ("jobs", "queues"):
            answer = hub.call("GET", path, bob)
            assert (answer.status_code, answer.headers.get("Retry-After")) == (503, "5")
            assert answer.json()["error"] == "BackendUnavailable", answer.text
            assert answer.json()["message"] == (
                "the hub cannot be reached to check who is calling (it may be restarting); "
                "try again in a few seconds"
            )
    finally:
        # the proxy and the services the hub started, orphans now
        for proc in psutil.wait_procs(family, timeout=0)[1]:
            proc.kill()
        psutil.wait_procs(family, timeout=30)


def _answers(url: str) -> bool:
    import requests

    try:
        return requests.get(f"{url}/services/aviflow-api/api/v1/openapi.json", timeout=5).ok
    except requests.RequestException:
        return False


def _kinds(job: Job) -> list[EventType]:
    """The job's lifecycle events, without USAGE notes (one a minute while it runs)."""
    return [e.type for e in job.events() if e.type is not EventType.USAGE]


def _said(jobs: dict[str, Job]) -> str:
    return "; ".join(
        f"{name}: {[(e.type.value, e.attempt) for e in job.events()]}" for name, job in jobs.items()
    )
