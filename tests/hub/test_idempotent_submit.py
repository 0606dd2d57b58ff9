"""A retried submission never makes a second job: aviflow-api's ``Idempotency-Key`` (per user,
for a day, kept in the ledger: SQLite and PostgreSQL), and the Python client, which sends a
key with every submission and sends it again when the answer is lost. Behind a real
JupyterHub on the local backend; the Kubernetes backend's side (a create whose answer is
lost, a submission cut short) is ``tests/k8s/test_orphans.py``."""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from aviflow import api
from aviflow.backends import hub as hub_backend
from aviflow.backends.hub import HubBackend
from aviflow.spec import TrainJob
from aviflow_hub.ledger import Ledger
from aviflow_hub.ledger.store import KEY_SECONDS

pytestmark = pytest.mark.timeout(600)

T0 = 1_767_225_000.0


def spec(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"script": "print(1)", "queue": "default"}}


def test_a_key_names_one_job_of_its_user_for_a_day(ledger_url: str) -> None:
    ledger = Ledger(ledger_url)
    assert ledger.claim_key("alice", "k1", "h1", "a-00000001", T0) == ("a-00000001", "h1")
    # the key again: the job first chosen, and what was asked first (another ask is refused)
    assert ledger.claim_key("alice", "k1", "h2", "a-00000002", T0 + 60) == ("a-00000001", "h1")
    assert ledger.claim_key("bob", "k1", "h1", "b-00000003", T0 + 60) == ("b-00000003", "h1")
    # a day on, the key is forgotten (every expired key goes with the next claim)
    later = T0 + KEY_SECONDS + 1
    assert ledger.claim_key("alice", "k1", "h2", "a-00000004", later) == ("a-00000004", "h2")
    assert ledger.claim_key("bob", "k1", "h9", "b-00000005", later + 60) == ("b-00000005", "h9")
    ledger.close()


def test_a_retried_post_returns_the_job_the_first_one_made(
    hub_factory: Any,
    stop_jobs: Callable[[Path], list[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hub = hub_factory()
    try:
        retried(hub, monkeypatch)
    finally:
        stray = stop_jobs(hub.run_root)
    assert not stray, f"jobs left processes behind: {stray}"


def retried(hub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's steps (its hub's jobs are stopped whatever happens)."""
    alice, bob = hub.token("alice"), hub.token("bob")
    key = {"Idempotency-Key": "7f3a-retry"}
    first = hub.call("POST", "jobs", alice, json={"spec": spec("once")}, headers=key)
    again = hub.call("POST", "jobs", alice, json={"spec": spec("once")}, headers=key)
    assert (first.status_code, again.status_code) == (201, 201), again.text
    assert first.json() == again.json()
    job_id = first.json()["id"]
    theirs = hub.call("POST", "jobs", bob, json={"spec": spec("once")}, headers=key)
    assert theirs.status_code == 201 and theirs.json()["id"] != job_id  # bob's own key
    reused = hub.call("POST", "jobs", alice, json={"spec": spec("other")}, headers=key)
    assert (reused.status_code, reused.json()["error"]) == (422, "RequestError")
    assert reused.json()["message"] == (
        "the Idempotency-Key '7f3a-retry' was sent with another submission (another spec "
        f"or code) in the last day: job {job_id}; use a new key for a new job"
    )
    bad = hub.call(
        "POST", "jobs", alice, json={"spec": spec("x")}, headers={"Idempotency-Key": "a b"}
    )
    assert (bad.status_code, bad.json()["message"]) == (
        400,
        "the Idempotency-Key header must be 1 to 255 visible ASCII characters (no spaces)",
    )
    # the Python client: the answer to its POST is lost on the way back (the request went
    # through); it sends the request again with its key and gets the same job
    real, lost = urllib.request.urlopen, []

    def lossy(req: urllib.request.Request, *args: Any, **kw: Any) -> Any:
        resp = real(req, *args, **kw)
        if req.get_method() == "POST" and req.full_url.endswith("/jobs") and not lost:
            lost.append(req.get_header("Idempotency-key"))
            resp.close()
            raise TimeoutError("timed out")
        return resp

    monkeypatch.setattr(urllib.request, "urlopen", lossy)
    monkeypatch.setattr(hub_backend, "SUBMIT_PAUSE", 0.1)
    client = HubBackend(f"{hub.url}/services/aviflow-api/", token=alice)
    mine = api.submit(TrainJob.from_dict(spec("client")), backend=client)
    assert len(lost) == 1 and lost[0]
    listed = [j["id"] for j in hub.call("GET", "jobs", alice).json()["jobs"]]
    assert listed == [mine.id, job_id]  # newest first: one job per submission
