"""The sidebar's server extension on a real ``jupyter server`` with the local backend: its
routes, authentication, errors, incremental reads, and what it never shows (other users'
jobs)."""

from __future__ import annotations

import getpass
import json
import time
from typing import Any

import aviflow
from aviflow.backends.hub import API_URL_ENV, TOKEN_ENV, USER_ENV
from aviflow.backends.local import LocalBackend
from aviflow.examples.notebook import EXAMPLE_NAME, example_notebook
from aviflow.records import Event, EventType, FailureInfo, JobState, JobStatus
from aviflow_testcluster import wait_for

ME = getpass.getuser()


def test_the_job_list_is_mine_newest_first_then_only_what_changed(
    jupyter_server: Any, make_job: Any
) -> None:
    old = make_job(JobState.SUCCEEDED, name="old", user=ME)
    theirs = make_job(JobState.RUNNING, name="theirs", user="mallory")
    failure = FailureInfo(rank=3, node=1, attempt=1, exception="ValueError", message="bad batch")
    failed = make_job(JobState.FAILED, name="broken", user=ME, failure=failure)
    queued = make_job(JobState.QUEUED, name="waits", user=ME, queue_position=2)
    server = jupyter_server()

    first = server.get("aviflow/jobs")
    assert first["reset"] is True and first["removed"] == []
    assert first["user"] == ME and first["backend"] == "local"
    assert [j["id"] for j in first["jobs"]] == [queued.id, failed.id, old.id]
    assert theirs.id not in json.dumps(first)
    by_id = {j["id"]: j for j in first["jobs"]}
    assert by_id[queued.id]["state"] == "QUEUED"
    assert by_id[queued.id]["queuePosition"] == 2
    assert by_id[queued.id]["message"] == "waiting for GPU slots"
    assert (by_id[queued.id]["nodes"], by_id[queued.id]["gpusPerNode"]) == (2, 2)
    assert by_id[failed.id]["failure"]["rank"] == 3
    assert by_id[failed.id]["failure"]["exception"] == "ValueError"
    assert abs(first["now"] - time.time()) < 30

    cursor = first["next"]
    same = server.get(f"aviflow/jobs?since={cursor}")
    assert (same["jobs"], same["removed"], same["next"], same["reset"]) == ([], [], cursor, False)

    # the queued job starts: only it comes back, with the new state
    run = queued.backend.run_dir(queued.id)
    t = time.time()
    run.record(
        [Event(EventType.STARTING, 1, "starting", t), Event(EventType.RUNNING, 1, "running", t)],
        JobStatus(JobState.RUNNING, 1, "running", t),
    )

    def changed() -> Any:
        found = server.get(f"aviflow/jobs?since={cursor}")
        return found if found["jobs"] else None

    after = wait_for(changed, 15, "the started job in the changes")
    assert [(j["id"], j["state"]) for j in after["jobs"]] == [(queued.id, "RUNNING")]
    assert after["next"] > cursor and after["reset"] is False

    # a new job of mine appears (next to the running one, whose GPU-hours grow); a new one
    # of someone else's never does
    make_job(JobState.QUEUED, name="theirs-2", user="mallory")
    mine = make_job(JobState.QUEUED, name="new", user=ME)
    later = wait_for(
        lambda: server.get(f"aviflow/jobs?since={after['next']}")["jobs"], 15, "the new job"
    )
    assert [j["id"] for j in later if j["id"] != queued.id] == [mine.id]


def test_a_cursor_of_another_server_process_gets_the_whole_list(
    jupyter_server: Any, make_job: Any
) -> None:
    job = make_job(JobState.SUCCEEDED, user=ME)
    server = jupyter_server()
    answer = server.get("aviflow/jobs?since=123")
    assert answer["reset"] is True
    assert [j["id"] for j in answer["jobs"]] == [job.id]


def test_requests_without_a_login_are_refused(jupyter_server: Any, make_job: Any) -> None:
    job = make_job(JobState.QUEUED, user=ME)
    server = jupyter_server()
    for method, path in [
        ("GET", "aviflow/jobs"),
        ("GET", "aviflow/queues"),
        ("GET", f"aviflow/jobs/{job.id}"),
        ("GET", f"aviflow/jobs/{job.id}/logs/0"),
        ("GET", "aviflow/example"),
        ("POST", f"aviflow/jobs/{job.id}/cancel"),
    ]:
        for token in (None, "wrong-token"):
            resp = server.request(method, path, token=token)
            assert resp.status_code == 403, (method, path, token, resp.status_code)
    assert job.status is JobState.QUEUED
    # a browser session without the XSRF token may not cancel either
    session_post = server.request(
        "POST", f"aviflow/jobs/{job.id}/cancel", token=None, cookies={"_xsrf": "x"}
    )
    assert session_post.status_code == 403
    assert job.status is JobState.QUEUED


def test_bad_parameters_get_a_clear_400(jupyter_server: Any, make_job: Any) -> None:
    job = make_job(JobState.RUNNING, user=ME)
    server = jupyter_server()
    cases = {
        "aviflow/jobs?since=abc": "since must be a whole number, got 'abc'",
        "aviflow/jobs?since=-1": "since must be between 0 and 9007199254740992, got -1",
        f"aviflow/jobs/{job.id}/logs/x": "rank must be a whole number, got 'x'",
        f"aviflow/jobs/{job.id}/logs/0?tail=99999": ("tail must be between 0 and 10000, got 99999"),
    }
    for path, message in cases.items():
        resp = server.request("GET", path)
        assert resp.status_code == 400, (path, resp.text)
        assert resp.json() == {"error": "RequestError", "message": message}
    missing = server.request("GET", "aviflow/nothing-here")
    assert missing.status_code == 404, missing.text
    assert missing.json()["message"] == "no such Aviflow route: /aviflow/nothing-here"


def test_a_job_view_is_the_panels_rendering(jupyter_server: Any, make_job: Any) -> None:
    job = make_job(JobState.RUNNING, user=ME, metrics=30, checkpoints=(10, 20), name="viewed")
    theirs = make_job(JobState.RUNNING, user="mallory")
    server = jupyter_server()
    view = server.get(f"aviflow/jobs/{job.id}")
    j = view["job"]
    assert (j["id"], j["name"], j["state"], j["nodes"], j["gpusPerNode"]) == (
        job.id,
        "viewed",
        "RUNNING",
        2,
        2,
    )
    assert j["logRanks"] == [0, 1, 2, 3]
    assert [c["step"] for c in j["checkpoints"]] == [10, 20]
    assert j["metricRows"] == 30
    assert len(j["metrics"]["loss"]) == 30 and j["metrics"]["loss"][-1] == [30, 1 / 30]
    html = view["html"]
    assert set(html) == {"header", "failure", "charts", "ranks", "checkpoints"}
    assert "data-state='RUNNING'" in html["header"] and "viewed" in html["header"]
    assert "data-metric='loss'" in html["charts"] and "<script" not in json.dumps(html)
    assert html["checkpoints"].count("class='aviflow-checkpoint'") == 2
    assert html["failure"] == ""
    # the next read costs what changed: one more metric row shows up as one more row
    run = job.backend.run_dir(job.id)
    from aviflow.records import MetricRow

    run.append_metric(MetricRow(31, time.time(), 1, {"loss": 0.01}))
    again = server.get(f"aviflow/jobs/{job.id}")["job"]
    assert again["metricRows"] == 31 and again["metrics"]["loss"][-1] == [31, 0.01]

    for other in (theirs.id, "no-such-job", "UPPER", "a" * 64):
        resp = server.request("GET", f"aviflow/jobs/{other}")
        assert resp.status_code == 404, other
        assert resp.json()["error"] == "JobNotFound"
    assert server.request("GET", f"aviflow/jobs/{theirs.id}/logs/0").status_code == 404


def test_logs_are_read_from_the_tail_then_from_the_last_offset(
    jupyter_server: Any, make_job: Any
) -> None:
    job = make_job(JobState.RUNNING, user=ME, log_lines=5)
    server = jupyter_server()
    tail = server.get(f"aviflow/jobs/{job.id}/logs/1?tail=2")
    assert tail["rank"] == 1 and tail["text"] == "rank 1 line 3\nrank 1 line 4\n"
    nothing = server.get(f"aviflow/jobs/{job.id}/logs/1?offset={tail['next']}")
    assert nothing["text"] == "" and nothing["next"] == tail["next"]
    with job.backend.run_dir(job.id).rank_log(1).open("a") as f:
        f.write("step 7 loss 0.5\n")
    more = server.get(f"aviflow/jobs/{job.id}/logs/1?offset={tail['next']}")
    assert more["text"] == "step 7 loss 0.5\n"


def test_cancel_stops_my_job_and_never_someone_elses(
    jupyter_server: Any, make_job: Any, local_backend: LocalBackend, leftover_processes: Any
) -> None:
    sleeper = {"metadata": {"name": "sleeps"}, "spec": {"command": ["sleep", "600"]}}
    mine = aviflow.submit(sleeper, backend=local_backend)
    wait_for(lambda: mine.status is JobState.RUNNING, 120, "the job running")
    done = make_job(JobState.SUCCEEDED, user=ME)
    theirs = make_job(JobState.QUEUED, user="mallory")
    server = jupyter_server()
    resp = server.request("POST", f"aviflow/jobs/{mine.id}/cancel")
    # asked for at once: the state then (or, if the supervisor was quicker, the end)
    assert resp.status_code == 202 and resp.json() in (
        {"id": mine.id, "cancelled": True, "state": "RUNNING"},
        {"id": mine.id, "cancelled": True, "state": "CANCELLED"},
    )
    assert mine.wait(timeout=60) is JobState.CANCELLED
    wait_for(lambda: leftover_processes(mine.id) == [], 30, "no process of the job left")
    again = server.request("POST", f"aviflow/jobs/{done.id}/cancel")
    assert (again.status_code, again.json()) == (
        200,
        {"id": done.id, "cancelled": False, "state": "SUCCEEDED"},
    )
    refused = server.request("POST", f"aviflow/jobs/{theirs.id}/cancel")
    assert refused.status_code == 404 and refused.json()["error"] == "JobNotFound"
    assert theirs.status is JobState.QUEUED
    # the list shows the cancellation (it is read again after a cancel)
    states = {j["id"]: j["state"] for j in server.get("aviflow/jobs")["jobs"]}
    assert states[mine.id] == "CANCELLED"


def test_queues_show_the_quota_and_use(jupyter_server: Any, run_root: Any, make_job: Any) -> None:
    LocalBackend(root=run_root, capacity=8, quotas={"default": 4})
    make_job(JobState.RUNNING, user=ME)  # 2 x 2 GPUs in use
    waits = make_job(JobState.QUEUED, user="mallory", queue_position=1)
    server = jupyter_server()
    [queue] = server.get("aviflow/queues")["queues"]
    assert (queue["queue"], queue["gpuQuota"], queue["gpusInUse"], queue["borrowed"]) == (
        "default",
        4,
        4,
        0,
    )
    assert queue["pendingCount"] == 1
    assert [(p["id"], p["position"], p["gpus"]) for p in queue["pending"]] == [(waits.id, 1, 4)]


def test_a_first_start_writes_the_example_notebook_once(jupyter_server: Any) -> None:
    server = jupyter_server()
    example = server.root_dir / EXAMPLE_NAME
    assert json.loads(example.read_text()) == example_notebook()
    assert server.get("aviflow/example") == {"name": EXAMPLE_NAME, "notebook": example_notebook()}
    cells = example_notebook()["cells"]
    assert "".join(cells[2]["source"]).startswith("%%aviflow_train --nodes 2 --gpus-per-node 2")
    # deleted by the user, it does not come back on the next start
    example.unlink()
    server.stop()
    again = jupyter_server()  # the same name: the same home and data directory
    assert again.root_dir == server.root_dir
    assert not example.exists()


def test_an_unreachable_aviflow_api_is_a_503_that_says_so(jupyter_server: Any) -> None:
    from aviflow._ports import free_port

    api = f"http://127.0.0.1:{free_port()}/services/aviflow-api/api/v1/"
    server = jupyter_server("hubbed", **{API_URL_ENV: api, TOKEN_ENV: "t", USER_ENV: "alice"})
    for path in ("aviflow/jobs", "aviflow/queues", "aviflow/jobs/some-job"):
        resp = server.request("GET", path)
        assert resp.status_code == 503, (path, resp.text)
        body = resp.json()
        assert body["error"] == "BackendUnavailable"
        assert body["message"].startswith(f"cannot reach aviflow-api at {api}")
    # the server itself keeps serving
    assert server.request("GET", "api/status").status_code == 200


def test_other_users_newer_jobs_never_push_mine_out_of_the_list(make_job: Any) -> None:
    """The sidebar lists my newest ``limit`` jobs, asked for by user: a store (or a team admin's
    view of aviflow-api) with more newer jobs of other people than the limit still shows mine."""
    import asyncio

    from aviflow_jupyter.reads import JobReads

    mine = [make_job(JobState.SUCCEEDED, name=f"mine-{i}", user=ME) for i in range(3)]
    for i in range(4):
        make_job(JobState.SUCCEEDED, name=f"theirs-{i}", user="mallory")
    reads = JobReads(backend=lambda: mine[0].backend, user=ME, limit=2)
    try:
        listed = asyncio.run(reads.jobs(0))
    finally:
        reads.close()
    assert [j["id"] for j in listed.jobs] == [mine[2].id, mine[1].id]


def test_the_reader_checks_owners_unless_the_backend_authorizes_reads(make_job: Any) -> None:
    """A run store holds every user's jobs: the extension refuses another user's job by id,
    unless its backend declares ``authorizes_reads`` (aviflow-api decides by the token)."""
    import asyncio

    import pytest

    from aviflow.errors import JobNotFound
    from aviflow_jupyter.reads import JobReads

    theirs = make_job(JobState.SUCCEEDED, name="theirs", user="mallory")

    class Authorizing(LocalBackend):
        authorizes_reads = True

    for backend, shown in ((theirs.backend, False), (Authorizing(theirs.backend.store.root), True)):
        reads = JobReads(backend=lambda b=backend: b, user=ME)
        try:
            if shown:
                assert asyncio.run(reads.job(theirs.id))["job"]["id"] == theirs.id
            else:
                with pytest.raises(JobNotFound, match=f"no job '{theirs.id}' of {ME}"):
                    asyncio.run(reads.job(theirs.id))
        finally:
            reads.close()
