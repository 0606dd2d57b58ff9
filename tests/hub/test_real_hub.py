"""aviflow-api behind a real JupyterHub: isolation, scopes, queues, XSRF, usage, notebooks.

One hub per module (``real_hub``): alice (team-a), bob (team-b), lead (admin of team-a) and
root (hub admin). The local backend has one GPU slot, so a second job waits in the queue.
"""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import pytest
import requests

from aviflow import api
from aviflow.backends import get_backend
from aviflow.backends.local import LocalBackend
from aviflow.status import JobState, usage_from_events
from aviflow_hub.client import HubBackend

pytestmark = pytest.mark.timeout(900)

SLEEPER = {
    "apiVersion": "aviflow.dev/v1", "kind": "TrainJob",
    "metadata": {"name": "sleeper"},
    "spec": {"script": "import time\ntime.sleep(900)\n"},
}
JOB_PARTS = ["", "/events", "/logs", "/logs/0", "/metrics", "/checkpoints", "/failures"]


def spec(queue: str = "default", name: str = "sleeper") -> dict[str, Any]:
    return {**SLEEPER, "metadata": {"name": name}, "spec": {**SLEEPER["spec"], "queue": queue}}


def client(hub: Any, token: str) -> HubBackend:
    return HubBackend(f"{hub.url}/services/aviflow-api/", token=token)


def wait_state(hub: Any, token: str, job_id: str, states: set[str], timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = hub.call("GET", f"jobs/{job_id}", token).json()["status"]["state"]
        if state in states or JobState(state).is_finished() or time.monotonic() > deadline:
            assert state in states, f"{job_id} is {state}, wanted {states}"
            return state
        time.sleep(0.5)


@pytest.fixture(scope="module")
def tokens(real_hub: Any) -> dict[str, str]:
    return {u: real_hub.token(u) for u in ("alice", "bob", "lead")} | {
        "root": real_hub.token("root", password="aviflow-test-admin-password-0123456789")}


@pytest.fixture(scope="module")
def jobs(real_hub: Any, tokens: dict[str, str]) -> dict[str, str]:
    """alice's job runs (the only GPU slot); bob's waits behind it."""
    a = api.submit(spec(), backend=client(real_hub, tokens["alice"])).id
    wait_state(real_hub, tokens["alice"], a, {"STARTING", "RUNNING"})
    b = api.submit(spec(), backend=client(real_hub, tokens["bob"])).id
    return {"alice": a, "bob": b}


def test_submission_lands_in_the_users_team_queue(real_hub: Any, tokens: dict[str, str],
                                                   jobs: dict[str, str]) -> None:
    got = real_hub.call("GET", f"jobs/{jobs['alice']}", tokens["alice"]).json()
    assert (got["user"], got["team"], got["queue"]) == ("alice", "team-a", "queue-a")
    assert got["spec"]["spec"]["queue"] == "queue-a"
    assert got["spec"]["metadata"]["labels"] == {"aviflow.dev/user": "alice", "aviflow.dev/team": "team-a"}
    assert got["meta"]["origin"]["hub"] == {"user": "alice", "team": "team-a"}
    bob = real_hub.call("GET", f"jobs/{jobs['bob']}", tokens["bob"]).json()
    assert (bob["team"], bob["queue"], bob["state"]) == ("team-b", "queue-b", "QUEUED")


def test_users_see_only_their_own_jobs(real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]) -> None:
    listed = {u: [j["id"] for j in real_hub.call("GET", "jobs", t).json()["jobs"]] for u, t in tokens.items()}
    assert listed["alice"] == [jobs["alice"]]
    assert listed["bob"] == [jobs["bob"]]
    assert listed["lead"] == [jobs["alice"]]  # team-a admin
    assert listed["root"] == [jobs["alice"], jobs["bob"]]  # hub admin


def test_every_job_endpoint_refuses_other_users(real_hub: Any, tokens: dict[str, str],
                                                jobs: dict[str, str]) -> None:
    for viewer, other in (("alice", "bob"), ("bob", "alice"), ("lead", "bob")):
        for part in JOB_PARTS:
            r = real_hub.call("GET", f"jobs/{jobs[other]}{part}", tokens[viewer])
            assert r.status_code in (403, 404), (viewer, part, r.status_code, r.text)
        r = real_hub.call("POST", f"jobs/{jobs[other]}/cancel", tokens[viewer], json={})
        assert r.status_code in (403, 404), (viewer, r.status_code)
    state = real_hub.call("GET", f"jobs/{jobs['bob']}", tokens["bob"]).json()["state"]
    assert state == "QUEUED"  # nobody cancelled it
    for part in JOB_PARTS:  # the owner, the team admin and a hub admin may read
        for viewer in ("alice", "lead", "root"):
            r = real_hub.call("GET", f"jobs/{jobs['alice']}{part}", tokens[viewer])
            assert r.status_code == 200, (viewer, part, r.text)


def test_no_submission_to_another_teams_queue(real_hub: Any, tokens: dict[str, str]) -> None:
    with pytest.raises(Exception, match=r"\(403\).*belongs to team 'team-b'"):
        api.submit(spec("queue-b"), backend=client(real_hub, tokens["alice"]))
    r = real_hub.call("POST", "jobs", tokens["alice"], json={"spec": spec("nope")})
    assert (r.status_code, r.json()["message"]) == (400, "no queue 'nope'; your queues: queue-a")
    r = real_hub.call("POST", "jobs", tokens["alice"], json={"spec": {**spec(), "spec": {"scrpt": "x"}}})
    assert r.status_code == 400 and "did you mean 'script'" in r.json()["message"]


def test_queues_show_quota_usage_and_positions(real_hub: Any, tokens: dict[str, str],
                                               jobs: dict[str, str]) -> None:
    bob = real_hub.call("GET", "queues", tokens["bob"]).json()["queues"]
    assert bob == [{"team": "team-b", "queue": "queue-b", "gpuQuota": 4, "gpusInUse": 0,
                    "pendingCount": 1, "pending": [{"id": jobs["bob"], "user": "bob", "position": 1, "gpus": 1}]}]
    alice = real_hub.call("GET", "queues", tokens["alice"]).json()["queues"]
    assert [(q["queue"], q["gpusInUse"], q["pendingCount"]) for q in alice] == [("queue-a", 1, 0)]
    root = real_hub.call("GET", "queues", tokens["root"]).json()["queues"]
    assert [q["queue"] for q in root] == ["queue-a", "queue-b"]
    # what `%%aviflow_train --dry-run` shows in a hub notebook
    assert client(real_hub, tokens["bob"]).quota("default") == {
        "queue": "queue-b", "gpuQuota": 4, "gpusInUse": 0, "pendingCount": 1}
    assert client(real_hub, tokens["alice"]).quota("queue-a")["gpusInUse"] == 1
    assert client(real_hub, tokens["alice"]).quota("queue-b") is None


def test_tokens_without_the_needed_scope_are_refused(real_hub: Any, tokens: dict[str, str],
                                                     jobs: dict[str, str]) -> None:
    access = "access:services!service=aviflow-api"
    no_custom = real_hub.token("alice", scopes=[access])
    read_only = real_hub.token("alice", scopes=[access, "custom:aviflow:read"])
    no_access = real_hub.token("alice", scopes=["custom:aviflow:read", "custom:aviflow:submit"])
    assert real_hub.call("GET", "jobs", no_custom).status_code == 403
    assert real_hub.call("GET", f"jobs/{jobs['alice']}/logs", no_custom).status_code == 403
    assert real_hub.call("GET", "jobs", no_access).status_code == 403
    assert real_hub.call("GET", "jobs", None).status_code == 403
    assert real_hub.call("GET", "jobs", "not-a-token").status_code == 403
    assert real_hub.call("GET", "jobs", read_only).status_code == 200
    assert real_hub.call("POST", "jobs", read_only, json={"spec": spec()}).status_code == 403
    assert real_hub.call("POST", f"jobs/{jobs['alice']}/cancel", read_only, json={}).status_code == 403
    assert real_hub.call("GET", "openapi.json", None).json()["info"]["title"] == "aviflow-api"


def test_forms_are_xsrf_protected(real_hub: Any, tokens: dict[str, str]) -> None:
    s = requests.Session()
    login = f"{real_hub.url}/hub/login"
    page = s.get(login, timeout=60)
    form = {"username": "alice", "password": "aviflow-test-pw"}
    assert s.post(login, data=form, allow_redirects=False, timeout=60).status_code == 403
    r = s.post(login, data={**form, "_xsrf": real_hub.xsrf_from(page.text)}, allow_redirects=False, timeout=60)
    assert r.status_code == 302, r.text
    home = s.get(f"{real_hub.url}/services/aviflow-api/", timeout=60)  # through the OAuth dance
    assert home.status_code == 200 and "Aviflow jobs of alice" in home.text, real_hub.log()[-6000:]
    job_id = api.submit(spec(name="form-target"), backend=client(real_hub, tokens["alice"])).id
    home = s.get(f"{real_hub.url}/services/aviflow-api/", timeout=60)
    cancel = f"{real_hub.url}/services/aviflow-api/jobs/{job_id}/cancel"
    r = s.post(cancel, data={}, allow_redirects=False, timeout=120)
    assert r.status_code == 403
    r = s.post(cancel, data={"_xsrf": "forged"}, allow_redirects=False, timeout=120)
    assert r.status_code == 403
    assert real_hub.call("GET", f"jobs/{job_id}", tokens["alice"]).json()["state"] != "CANCELLED"
    r = s.post(cancel, data={"_xsrf": real_hub.xsrf_from(home.text)}, allow_redirects=False, timeout=120)
    assert r.status_code == 302, r.text
    assert real_hub.call("GET", f"jobs/{job_id}", tokens["alice"]).json()["state"] == "CANCELLED"
    report = s.get(f"{real_hub.url}/services/aviflow-api/report", timeout=60)
    assert report.status_code == 200 and "<svg" in report.text and "GPU-hours by team" in report.text


def test_notebook_environment_selects_the_hub_backend(real_hub: Any, jobs: dict[str, str],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What a hub-spawned notebook has: $AVIFLOW_API_URL and a token with the server scopes."""
    from aviflow_hub.config import load_config
    from aviflow_hub.settings import SERVER_TOKEN_SCOPES, notebook_environment

    env = notebook_environment(load_config(real_hub.config_path))
    assert env == {"AVIFLOW_API_URL": f"http://127.0.0.1:{_api_port(real_hub)}/services/aviflow-api/"}
    token = real_hub.token("alice", scopes=list(SERVER_TOKEN_SCOPES))
    monkeypatch.setenv("AVIFLOW_API_URL", env["AVIFLOW_API_URL"])
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", token)
    monkeypatch.delenv("AVIFLOW_BACKEND", raising=False)
    assert isinstance(get_backend(), HubBackend)
    mine = [j.id for j in api.jobs()]
    assert jobs["alice"] in mine and jobs["bob"] not in mine
    handle = api.get(jobs["alice"])
    assert handle.spec.spec.queue == "queue-a" and handle.checkpoints() == [] and handle.metric_rows() == []
    assert handle.status.value in ("STARTING", "RUNNING")


def test_usage_equals_the_event_logs(real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]) -> None:
    for who in ("alice", "bob"):
        r = real_hub.call("POST", f"jobs/{jobs[who]}/cancel", tokens[who], json={})
        assert r.status_code == 200 and r.json()["state"] == "CANCELLED", r.text
    local = LocalBackend(root=real_hub.run_root, capacity=1)
    expected: dict[str, float] = {}
    for job_id in local.list_ids():
        user = local.meta(job_id)["origin"]["hub"]["user"]
        usage = usage_from_events(local.events(job_id), local.spec(job_id).spec.total_gpus)
        if usage.attempts:  # a job that never started has no attempt row
            expected[user] = expected.get(user, 0.0) + usage.gpu_seconds
        assert JobState(local.status(job_id)["state"]).is_finished()
    rows = real_hub.call("GET", "usage?by=user", tokens["root"]).json()["rows"]
    assert {r["key"]: r["gpu_seconds"] for r in rows} == {u: round(s, 3) for u, s in expected.items()}
    mine = real_hub.call("GET", "usage?by=user", tokens["alice"]).json()["rows"]
    assert [r["key"] for r in mine] == ["alice"]
    text = real_hub.call("GET", "usage?by=team&format=csv", tokens["root"]).text
    table = list(csv.DictReader(io.StringIO(text)))
    started_teams = sorted({local.meta(j)["origin"]["hub"]["team"] for j in local.list_ids()
                            if usage_from_events(local.events(j), 1).attempts})
    assert [t["team"] for t in table] == started_teams  # a job that never started has no attempt
    metrics_url = f"{real_hub.url}/services/aviflow-api/metrics"
    metrics = requests.get(metrics_url, headers={"Authorization": f"token {tokens['root']}"}, timeout=60)
    assert metrics.status_code == 200
    assert f'aviflow_jobs{{status="CANCELLED"}} {float(len(local.list_ids()))}' in metrics.text
    assert "aviflow_queue_wait_seconds_bucket" in metrics.text and "aviflow_gpu_hours_total" in metrics.text
    alice = requests.get(metrics_url, headers={"Authorization": f"token {tokens['alice']}"}, timeout=60)
    assert alice.status_code == 403


def _api_port(hub: Any) -> int:
    import yaml

    return yaml.safe_load(hub.config_path.read_text())["api"]["port"]
