"""aviflow-api behind a real JupyterHub: isolation, scopes, queues, XSRF, usage, notebooks.

One hub per module (``real_hub``): alice (team-a), bob (team-b), lead (admin of team-a) and
root (hub admin). The local backend has one GPU slot, so a second job waits in the queue.
Listings, queues and usage come from the ledger, which follows the backend's change feed every
second: checks of what an action changed there poll with a deadline (``Hub.until``).
"""

from __future__ import annotations

import csv
import http.client
import io
import json
from typing import Any

import pytest
import requests

from aviflow import api
from aviflow.attempts import attempts_from_events, job_info, usage
from aviflow.backends import get_backend
from aviflow.backends.hub import HubBackend
from aviflow.backends.local import LocalBackend
from aviflow.errors import AccessDenied, JobNotFound
from aviflow.records import PendingJob, QueueQuota, TrainerImage

pytestmark = pytest.mark.timeout(900)

SLEEPER = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "sleeper"},
    "spec": {"script": "import time\ntime.sleep(900)\n"},
}
JOB_PARTS = ["", "/status", "/events", "/logs", "/logs/0", "/metrics", "/checkpoints", "/failures"]
# Where alice's job says it comes from; her client also claims it is carol's, of team-b.
CELL = {
    "kind": "notebook-cell",
    "notebook": "/home/alice/t.ipynb",
    "cell_id": "c1",
    "execution_count": 2,
}
CLAIMS_CAROL = {
    **CELL,
    "user": "carol",
    "team": "team-b",
    "hub": {"user": "carol", "team": "team-b"},
}


def spec(queue: str = "default", name: str = "sleeper") -> dict[str, Any]:
    return {**SLEEPER, "metadata": {"name": name}, "spec": {**SLEEPER["spec"], "queue": queue}}


def client(hub: Any, token: str) -> HubBackend:
    return HubBackend(f"{hub.url}/services/aviflow-api/", token=token)


def wait_state(hub: Any, token: str, job_id: str, states: set[str], timeout: float = 300) -> str:
    def reached() -> str | None:
        state = hub.call("GET", f"jobs/{job_id}/status", token).json()["state"]
        assert state in states or state in ("QUEUED", "STARTING", "RUNNING"), (
            job_id,
            state,
            states,
        )
        return state if state in states else None

    return hub.until(reached, f"{job_id} in {states}", timeout)


@pytest.fixture(scope="module")
def jobs(real_hub: Any, tokens: dict[str, str]) -> dict[str, str]:
    """alice's job runs (the only GPU slot); bob's waits behind it."""
    a = api.submit(spec(), backend=client(real_hub, tokens["alice"]), origin=CLAIMS_CAROL).id
    wait_state(real_hub, tokens["alice"], a, {"STARTING", "RUNNING"})
    b = api.submit(spec(), backend=client(real_hub, tokens["bob"])).id
    return {"alice": a, "bob": b}


def test_submission_lands_in_the_users_team_queue(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    got = real_hub.call("GET", f"jobs/{jobs['alice']}", tokens["alice"]).json()
    assert (got["user"], got["team"], got["queue"]) == ("alice", "team-a", "queue-a")
    assert got["spec"]["spec"]["queue"] == "queue-a"
    assert got["spec"]["metadata"]["labels"] == {
        "aviflow.dev/user": "alice",
        "aviflow.dev/team": "team-a",
    }
    assert (got["meta"]["user"], got["meta"]["team"], got["meta"]["backend"]) == (
        "alice",
        "team-a",
        "local",
    )
    assert (got["nodes"], got["gpusPerNode"], got["gpus"]) == (1, 1, 1)
    assert got["state"] == got["status"]["state"]  # the summary carries the current status
    # what alice's client said about itself is kept as far as it names the cell, never carol
    listed = real_hub.call("GET", "jobs", tokens["alice"]).json()["jobs"]
    assert got["meta"]["origin"] == got["origin"] == listed[0]["origin"] == CELL
    for other in ("carol", "team-b"):
        assert other not in json.dumps(got) + json.dumps(listed), (other, got)
    bob = real_hub.call("GET", f"jobs/{jobs['bob']}", tokens["bob"]).json()
    assert (bob["team"], bob["queue"], bob["state"]) == ("team-b", "queue-b", "QUEUED")
    assert client(real_hub, tokens["bob"]).status(jobs["bob"]).queue_position == 1


def test_users_see_only_their_own_jobs(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    listed = {
        u: [j["id"] for j in real_hub.call("GET", "jobs", t).json()["jobs"]]
        for u, t in tokens.items()
    }
    assert listed["alice"] == [jobs["alice"]]
    assert listed["bob"] == [jobs["bob"]]
    assert listed["lead"] == [jobs["alice"]]  # team-a admin
    assert listed["root"] == [jobs["bob"], jobs["alice"]]  # hub admin; newest first
    assert [
        j["id"] for j in real_hub.call("GET", "jobs?limit=1", tokens["root"]).json()["jobs"]
    ] == [jobs["bob"]]
    assert [s.id for s in client(real_hub, tokens["lead"]).summaries()] == [jobs["alice"]]


def test_every_job_endpoint_refuses_other_users(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    for viewer, other in (("alice", "bob"), ("bob", "alice"), ("lead", "bob")):
        for part in JOB_PARTS:
            r = real_hub.call("GET", f"jobs/{jobs[other]}{part}", tokens[viewer])
            assert (r.status_code, r.json()["error"]) == (404, "JobNotFound"), (
                viewer,
                part,
                r.text,
            )
        r = real_hub.call("POST", f"jobs/{jobs[other]}/cancel", tokens[viewer], json={})
        assert r.status_code == 404, (viewer, r.status_code)
    with pytest.raises(JobNotFound):
        client(real_hub, tokens["alice"]).status(jobs["bob"])
    state = real_hub.call("GET", f"jobs/{jobs['bob']}", tokens["bob"]).json()["state"]
    assert state == "QUEUED"  # nobody cancelled it
    for part in JOB_PARTS:  # the owner, the team admin and a hub admin may read
        for viewer in ("alice", "lead", "root"):
            r = real_hub.call("GET", f"jobs/{jobs['alice']}{part}", tokens[viewer])
            assert r.status_code == 200, (viewer, part, r.text)


def test_incremental_reads(real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]) -> None:
    alice = client(real_hub, tokens["alice"])
    first = alice.events(jobs["alice"])
    assert [e.type.value for e in first.items][:2] == ["QUEUED", "STARTING"]
    assert alice.events(jobs["alice"], since=first.next).items == []  # nothing new
    assert alice.metrics(jobs["alice"]).items == [] and alice.failures(jobs["alice"]) == []
    chunk = alice.log(jobs["alice"], 0, tail=5)
    assert chunk.rank == 0 and chunk.next == chunk.size
    assert alice.log(jobs["alice"], 0, offset=chunk.next).text == ""
    assert alice.ranks(jobs["alice"]) in ([], [0])


def test_no_submission_to_another_teams_queue(real_hub: Any, tokens: dict[str, str]) -> None:
    with pytest.raises(AccessDenied, match="belongs to team 'team-b'"):
        api.submit(spec("queue-b"), backend=client(real_hub, tokens["alice"]))
    r = real_hub.call("POST", "jobs", tokens["alice"], json={"spec": spec("nope")})
    assert r.status_code == 400 and r.json()["error"] == "SpecError"
    assert r.json()["problems"] == ["spec.queue: no queue 'nope'; your queues: queue-a"]
    r = real_hub.call(
        "POST", "jobs", tokens["alice"], json={"spec": {**spec(), "spec": {"scrpt": "x"}}}
    )
    assert (r.status_code, r.json()["error"]) == (400, "SpecError")
    assert "spec.scrpt: unknown key; did you mean 'script'?" in r.json()["problems"]


def test_images_list_what_jobs_run_in(real_hub: Any, tokens: dict[str, str]) -> None:
    """The service's backend here is the local one: one image, the service's Python (which
    is this checkout's .venv), that every job records and the magic compares against."""
    from importlib import metadata

    r = real_hub.call("GET", "images", tokens["bob"])
    assert r.status_code == 200, r.text
    versions = {n: metadata.version(n) for n in ("torch", "accelerate", "aviflow")}
    assert r.json() == {
        "images": [{"name": "local", "image": "", "lockHash": "", "packages": versions}]
    }
    assert client(real_hub, tokens["alice"]).images() == [TrainerImage("local", packages=versions)]


def test_queues_show_quota_usage_and_positions(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    bob_queue = {
        "team": "team-b",
        "queue": "queue-b",
        "gpuQuota": 4,
        "gpusInUse": 0,
        "pendingCount": 1,
        "borrowed": 0,
        "lendable": 0,
        "pending": [{"id": jobs["bob"], "user": "bob", "position": 1, "gpus": 1}],
    }
    assert real_hub.call("GET", "queues", tokens["bob"]).json()["queues"] == [bob_queue]
    alice = real_hub.until(
        lambda: [
            q
            for q in real_hub.call("GET", "queues", tokens["alice"]).json()["queues"]
            if q["gpusInUse"] == 1
        ],
        "alice's running job holds a GPU of queue-a in the ledger",
    )
    assert [(q["queue"], q["gpusInUse"], q["pendingCount"]) for q in alice] == [("queue-a", 1, 0)]
    root = real_hub.call("GET", "queues", tokens["root"]).json()["queues"]
    assert [q["queue"] for q in root] == ["queue-a", "queue-b"]
    lead = real_hub.call("GET", "queues", tokens["lead"]).json()["queues"]
    assert [q["queue"] for q in lead] == ["queue-a"]
    # what `%%aviflow_train --dry-run` shows in a hub notebook
    assert client(real_hub, tokens["bob"]).quota("default") == QueueQuota(
        queue="queue-b",
        gpu_quota=4,
        gpus_in_use=0,
        pending_count=1,
        team="team-b",
        pending=(PendingJob(jobs["bob"], "bob", position=1, gpus=1),),
    )
    assert client(real_hub, tokens["alice"]).quota("queue-a").gpus_in_use == 1  # type: ignore[union-attr]
    assert client(real_hub, tokens["alice"]).quota("queue-b") is None


def test_tokens_without_the_needed_scope_are_refused(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    access = "access:services!service=aviflow-api"
    no_custom = real_hub.token("alice", scopes=[access])
    read_only = real_hub.token("alice", scopes=[access, "custom:aviflow:read"])
    no_access = real_hub.token("alice", scopes=["custom:aviflow:read", "custom:aviflow:submit"])
    for token in (no_custom, no_access, None, "not-a-token"):
        r = real_hub.call("GET", "jobs", token)
        assert r.headers.get("Content-Type") == "application/json", (r.status_code, r.text)
        assert (r.status_code, r.json()["error"]) == (403, "AccessDenied"), r.text
    assert real_hub.call("GET", f"jobs/{jobs['alice']}/logs", no_custom).status_code == 403
    assert real_hub.call("GET", "images", no_custom).status_code == 403
    assert real_hub.call("GET", "images", read_only).status_code == 200
    assert real_hub.call("GET", "jobs", read_only).status_code == 200
    assert real_hub.call("POST", "jobs", read_only, json={"spec": spec()}).status_code == 403
    assert (
        real_hub.call("POST", f"jobs/{jobs['alice']}/cancel", read_only, json={}).status_code == 403
    )
    assert real_hub.call("GET", "openapi.json", None).json()["info"]["title"] == "aviflow-api"


def test_a_refusal_before_the_body_says_the_connection_closes(real_hub: Any) -> None:
    """``jobs`` streams request bodies, so it authenticates as soon as the headers are in; a
    refusal then ends the request before its body (even a GET's empty one) was read, and
    tornado closes the connection. The answer must say so: a proxy that keeps upstream
    connections alive (configurable-http-proxy) would otherwise reuse the closed socket and
    answer the user's next request 503 ("socket hang up")."""
    conn = http.client.HTTPConnection("127.0.0.1", _api_port(real_hub), timeout=60)
    try:
        for method, body in (("GET", None), ("POST", b"{}")):
            conn.request(
                method,
                "/services/aviflow-api/api/v1/jobs",
                body=body,
                headers={"Authorization": "token not-a-token", "Connection": "keep-alive"},
            )
            r = conn.getresponse()
            assert (r.status, json.loads(r.read())["error"]) == (403, "AccessDenied")
            assert r.getheader("Connection") == "close", (method, r.getheaders())
            conn.close()
        # a refusal after the body was read keeps the connection, as HTTP/1.1 does
        conn.request(
            "GET", "/services/aviflow-api/api/v1/nosuch", headers={"Connection": "keep-alive"}
        )
        r = conn.getresponse()
        assert (r.status, r.getheader("Connection")) == (404, None)
        r.read()
        conn.request("GET", "/services/aviflow-api/api/v1/openapi.json")
        assert conn.getresponse().status == 200  # the same connection, still open
    finally:
        conn.close()


def test_forms_are_xsrf_protected(real_hub: Any, tokens: dict[str, str]) -> None:
    s = requests.Session()
    login = f"{real_hub.url}/hub/login"
    page = s.get(login, timeout=60)
    form = {"username": "alice", "password": "aviflow-test-pw"}
    assert s.post(login, data=form, allow_redirects=False, timeout=60).status_code == 403
    r = s.post(
        login,
        data={**form, "_xsrf": real_hub.xsrf_from(page.text)},
        allow_redirects=False,
        timeout=60,
    )
    assert r.status_code == 302, r.text
    home = s.get(f"{real_hub.url}/services/aviflow-api/", timeout=60)  # through the OAuth dance
    assert home.status_code == 200 and "Aviflow jobs of alice" in home.text, real_hub.log()[-6000:]
    job_id = api.submit(spec(name="form-target"), backend=client(real_hub, tokens["alice"])).id
    home = s.get(f"{real_hub.url}/services/aviflow-api/", timeout=60)
    assert job_id in home.text  # recorded at submission, before the feed saw it
    cancel = f"{real_hub.url}/services/aviflow-api/jobs/{job_id}/cancel"
    r = s.post(cancel, data={}, allow_redirects=False, timeout=120)
    assert r.status_code == 403
    r = s.post(cancel, data={"_xsrf": "forged"}, allow_redirects=False, timeout=120)
    assert r.status_code == 403
    assert real_hub.call("GET", f"jobs/{job_id}", tokens["alice"]).json()["state"] != "CANCELLED"
    r = s.post(
        cancel, data={"_xsrf": real_hub.xsrf_from(home.text)}, allow_redirects=False, timeout=120
    )
    assert r.status_code == 302, r.text  # the cancel is asked for; the job ends right after
    wait_state(real_hub, tokens["alice"], job_id, {"CANCELLED"}, 60)
    real_hub.until(
        lambda: "CANCELLED" in s.get(f"{real_hub.url}/services/aviflow-api/", timeout=60).text,
        "the job list shows the cancelled job",
    )
    report = s.get(f"{real_hub.url}/services/aviflow-api/report", timeout=60)
    assert (
        report.status_code == 200 and "<svg" in report.text and "GPU-hours by team" in report.text
    )


def test_notebook_environment_selects_the_hub_backend(
    real_hub: Any, jobs: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a hub-spawned notebook has: $AVIFLOW_API_URL, $AVIFLOW_RUNS_MOUNT and a token with
    the server scopes."""
    from aviflow_hub.config import load_config
    from aviflow_hub.settings import SERVER_TOKEN_SCOPES, hub_settings

    path = real_hub.config_path
    env = hub_settings(load_config(path), path, base_dir=path.parent)["Spawner"]["environment"]
    assert env == {
        "AVIFLOW_API_URL": f"http://127.0.0.1:{_api_port(real_hub)}/services/aviflow-api/",
        "AVIFLOW_RUNS_MOUNT": str(real_hub.run_root),
    }
    token = real_hub.token("alice", scopes=list(SERVER_TOKEN_SCOPES))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
    monkeypatch.delenv("AVIFLOW_BACKEND", raising=False)
    backend = get_backend()
    assert isinstance(backend, HubBackend) and backend.runs_mount == real_hub.run_root
    mine = [j.id for j in api.jobs()]
    assert jobs["alice"] in mine and jobs["bob"] not in mine
    handle = api.get(jobs["alice"])
    assert (
        handle.spec.spec.queue == "queue-a"
        and handle.checkpoints() == []
        and handle.metric_rows() == []
    )
    assert handle.status.value in ("STARTING", "RUNNING")
    assert handle.meta.user == "alice"


def test_usage_equals_the_event_logs(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    for who in ("alice", "bob"):
        now = real_hub.call("GET", f"jobs/{jobs[who]}/status", tokens[who]).json()["state"]
        assert now in ("STARTING", "RUNNING", "QUEUED")
        r = real_hub.call("POST", f"jobs/{jobs[who]}/cancel", tokens[who], json={})
        # accepted at once: the state as it was (or, if the supervisor was quicker, the end)
        assert r.status_code == 202 and r.json() in (
            {"id": jobs[who], "cancelled": True, "state": now},
            {"id": jobs[who], "cancelled": True, "state": "CANCELLED"},
        ), r.text
    for who in ("alice", "bob"):
        wait_state(real_hub, tokens[who], jobs[who], {"CANCELLED"}, 60)
    r = real_hub.call("POST", f"jobs/{jobs['alice']}/cancel", tokens["alice"], json={})
    assert (r.status_code, r.json()) == (  # already finished
        200,
        {"id": jobs["alice"], "cancelled": False, "state": "CANCELLED"},
    )
    local = LocalBackend(root=real_hub.run_root, capacity=1)
    for who in ("alice", "bob"):  # the hub user who asked, not the service's OS user
        assert local.events(jobs[who]).items[-1].message == f"cancelled by {who}"
    expected: dict[str, float] = {}
    teams: set[str] = set()
    for job_id in local.list_ids():
        meta, job = local.meta(job_id), local.spec(job_id)
        info = job_info(meta, job)
        used = usage(attempts_from_events(info, local.events(job_id).items), info.gpus, now=0)
        if used.attempts:  # a job that never started has no attempt row
            expected[meta.user] = expected.get(meta.user, 0.0) + used.gpu_seconds
            teams.add(meta.team or "")
        assert local.status(job_id).state.is_finished()

    def by_user() -> dict[str, float] | None:
        rows = real_hub.call("GET", "usage?by=user", tokens["root"]).json()["rows"]
        got = {r["key"]: r["gpu_seconds"] for r in rows}
        return got if got == {u: round(s, 3) for u, s in expected.items()} else None

    real_hub.until(by_user, "the ledger's usage equals the event logs")
    mine = real_hub.call("GET", "usage?by=user", tokens["alice"]).json()["rows"]
    assert [r["key"] for r in mine] == ["alice"]
    text = real_hub.call("GET", "usage?by=team&format=csv", tokens["root"]).text
    table = list(csv.DictReader(io.StringIO(text)))
    assert [t["team"] for t in table] == sorted(teams)  # a job that never started has no attempt

    def all_cancelled() -> list[dict[str, Any]] | None:
        found = real_hub.call("GET", "jobs", tokens["root"]).json()["jobs"]
        return (
            found
            if {j["id"]: j["state"] for j in found} == dict.fromkeys(local.list_ids(), "CANCELLED")
            else None
        )

    listed = real_hub.until(all_cancelled, "the ledger lists every job as cancelled")
    assert sum(j["gpuSeconds"] for j in listed) == pytest.approx(sum(expected.values()), abs=0.01)
    metrics_url = f"{real_hub.url}/services/aviflow-api/metrics"
    metrics = requests.get(
        metrics_url, headers={"Authorization": f"token {tokens['root']}"}, timeout=60
    )
    assert metrics.status_code == 200
    assert f'aviflow_jobs{{status="CANCELLED"}} {float(len(local.list_ids()))}' in metrics.text
    assert (
        "aviflow_queue_wait_seconds_bucket" in metrics.text
        and "aviflow_gpu_hours_total" in metrics.text
    )
    alice = requests.get(
        metrics_url, headers={"Authorization": f"token {tokens['alice']}"}, timeout=60
    )
    assert (alice.status_code, alice.json()["error"]) == (403, "AccessDenied")


def _api_port(hub: Any) -> int:
    return hub.config()["api"]["port"]
