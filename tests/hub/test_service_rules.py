"""Pure parts of aviflow-api: request checks, error bodies, queue views, pages, and the OpenAPI
document against the routes the service serves. (The same checks on a real hub:
test_hub_hardening.py.)"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
from tornado.web import HTTPError

from aviflow.errors import (
    WIRE_ERRORS,
    AccessDenied,
    BackendError,
    JobNotFound,
    RequestError,
    SpecError,
    from_wire,
)
from aviflow.paging import MAX_PAGE_ROWS, PAGE_BYTES, PAGE_ROWS
from aviflow.records import ORIGIN_CLAIM, JobState, JobSummary, PendingJob, QueueQuota
from aviflow_hub.authz import READ_SCOPE, Principal
from aviflow_hub.config import HubConfig
from aviflow_hub.openapi import _document, operations
from aviflow_hub.service.app import make_app
from aviflow_hub.service.base import wire_error
from aviflow_hub.service.page_html import job_rows
from aviflow_hub.service.params import MAX_CURSOR, check_job_id, parse_int
from aviflow_hub.service.queues import queue_quotas
from aviflow_hub.service.submission import (
    TooLarge,
    file_name_problem,
    parse_bundle,
    parse_submission,
)

SPEC = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "t"},
    "spec": {"script": "print(1)"},
}


def body(**parts: Any) -> bytes:
    return json.dumps({"spec": SPEC, **parts}).encode()


@pytest.mark.parametrize(
    ("raw", "ok"),
    [
        ("0", True),
        ("4095", True),
        ("007", True),
        ("4096", False),
        ("-1", False),
        ("+1", False),
        (" 1", False),
        ("1 ", False),
        ("1e3", False),
        ("0x10", False),
        ("", False),
        ("\u0661", False),
        ("\u00b2", False),
        ("9" * 5000, False),
        ("1.0", False),
    ],
)
def test_integers_are_digits_within_bounds(raw: str, ok: bool) -> None:
    if ok:
        assert parse_int("rank", raw, 4095) == int(raw)
    else:
        with pytest.raises(RequestError, match="rank must be a whole number from 0 to 4095") as err:
            parse_int("rank", raw, 4095)
        assert len(str(err.value)) < 200
    assert parse_int("since", str(MAX_CURSOR), MAX_CURSOR) == 2**53


def test_a_page_limit_is_from_1_to_the_most_rows_a_page_holds() -> None:
    assert parse_int("limit", "1", MAX_PAGE_ROWS, minimum=1) == 1
    assert parse_int("limit", "10000", MAX_PAGE_ROWS, minimum=1) == MAX_PAGE_ROWS == 10_000
    for raw in ("0", "10001", "-1", "", "1e3"):
        with pytest.raises(RequestError) as err:
            parse_int("limit", raw, MAX_PAGE_ROWS, minimum=1)
        assert str(err.value) == f"limit must be a whole number from 1 to 10000, got {raw!r}"


@pytest.mark.parametrize("job_id", ["X", "a_b", "-a", "a" * 64, "a\n", "", "a/b", "a\x00"])
def test_only_job_ids_can_name_a_job(job_id: str) -> None:
    with pytest.raises(JobNotFound):
        check_job_id(job_id)
    assert check_job_id("tiny-3f9a1c2b") == "tiny-3f9a1c2b"


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("train.py", None),
        ("pkg/mod.py", None),
        ("a b/ü.py", None),
        (".hidden", None),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a/../b", "'.' or '..'"),
        ("./a", "'.' or '..'"),
        ("a//b", "empty"),
        ("a/", "empty"),
        ("", "is empty"),
        ("/etc/passwd", "absolute"),
        ("a\x00b", "NUL"),
        ("\ud800.py", "not valid Unicode"),
        ("x" * 256, "longer than 255"),
        ("a/" * 600, "longer than 1024"),
        ("MANIFEST.json", "reserved"),
        (".aviflow-job.yaml", "reserved for the runtime"),
    ],
)
def test_bundle_file_names(name: str, problem: str | None) -> None:
    found = file_name_problem(name)
    assert (found is None) if problem is None else (problem in (found or "")), found


def test_a_submission_is_checked_whole() -> None:
    job, bundle = parse_submission(
        body(bundle={"files": {"pkg/a.py": "eA=="}, "origin": {"notebook": "x.ipynb"}})
    )
    assert (job.metadata.name, bundle.files, bundle.entrypoint, bundle.origin) == (
        "t",
        {"pkg/a.py": b"x", "train.py": b"print(1)"},
        "train.py",
        {"notebook": "x.ipynb"},
    )
    cases: list[tuple[bytes, type[Exception], str]] = [
        (b"[" * 100_000 + b"]" * 100_000, RequestError, "nested too deeply"),
        (b"{", RequestError, "not JSON"),
        (b"\xff", RequestError, "not JSON"),
        (b"[]", RequestError, "must be an object"),
        (
            json.dumps({"spec": {**SPEC, "metadata": {"name": "a\ud800"}}}).encode(),
            SpecError,
            "surrogate",
        ),
        (body(bundel={}), RequestError, "did you mean 'bundle'?"),
        (body(bundle={"file": {}}), RequestError, "did you mean 'files'?"),
        (body(bundle={"files": []}), RequestError, "map file names"),
        (body(bundle={"files": {"a": "eA==", "a/b": "eA=="}}), RequestError, "inside the file 'a'"),
        (body(bundle={"files": {}, "entrypoint": "a.py"}), RequestError, "not one of bundle.files"),
        (body(bundle={"origin": []}), RequestError, "origin must be an object"),
        (body(bundle={"files": {"a": "!!"}}), RequestError, "not base64"),
        (
            json.dumps({"spec": {**SPEC, "spec": {"scriptFile": "x.py"}}}).encode(),
            RequestError,
            "scriptFile is read where the job is submitted from",
        ),
        (body(bundle={"files": {"train.py": "eA=="}}), RequestError, "no bundle.entrypoint"),
    ]
    for raw, cls, words in cases:
        with pytest.raises(cls, match=re.escape(words)):
            parse_submission(raw)
    with pytest.raises(TooLarge, match="at most 4096"):
        parse_bundle({"files": {f"f{i}": "" for i in range(4097)}})


def test_error_bodies_are_small_and_cross_as_the_same_class() -> None:
    big = "x" * 10_000_000
    cases: list[tuple[BaseException | None, int, type, int]] = [
        (SpecError([f"spec.nodes: {big}"] * 100), 500, SpecError, 400),
        (RequestError(big), 500, RequestError, 400),
        (TooLarge("too big"), 500, RequestError, 413),
        (JobNotFound("no job 'x'"), 500, JobNotFound, 404),
        (AccessDenied("no"), 500, AccessDenied, 403),
        (BackendError("capacity"), 500, BackendError, 409),
        (HTTPError(404), 404, JobNotFound, 404),
        (HTTPError(403, "xsrf %s", "missing"), 403, AccessDenied, 403),
        (HTTPError(405), 405, RequestError, 405),
        (HTTPError(400, "Invalid unicode"), 400, RequestError, 400),
        (KeyError("a secret detail"), 500, BackendError, 500),
        (None, 500, BackendError, 500),
    ]
    for exc, given, cls, status in cases:
        got, wire = wire_error(exc, given, "Reason")
        assert (got, wire["status"]) == (status, status), exc
        assert (
            set(wire) == {"status", "error", "message", "problems"} and wire["error"] in WIRE_ERRORS
        )
        assert len(json.dumps(wire)) < 16_000, exc
        assert type(from_wire(wire, got)) is cls, (exc, wire)
        assert "secret" not in json.dumps(wire)
    _, wire = wire_error(SpecError(["spec.nodes: must be between 1 and 64, got 0"]), 500)
    assert from_wire(wire, 400).problems == ["spec.nodes: must be between 1 and 64, got 0"]


CFG = HubConfig.from_dict(
    {
        "teams": [
            {
                "name": "a",
                "groups": ["a"],
                "adminGroups": ["a-admins"],
                "queue": "qa",
                "gpuQuota": 8,
            },
            {"name": "b", "groups": ["b"], "queue": "qb", "gpuQuota": 2},
        ]
    }
)


def summary(
    job_id: str, user: str, team: str, state: JobState, submitted: float, gpus: int = 1
) -> JobSummary:
    return JobSummary(job_id, job_id, user, team, f"q{team}", 1, gpus, state, submitted=submitted)


def test_queues_from_the_ledgers_unfinished_jobs() -> None:
    jobs = [
        summary("r1", "alice", "a", JobState.RUNNING, 1, gpus=4),
        summary("s1", "carol", "a", JobState.STARTING, 2, gpus=2),
        summary("w2", "carol", "a", JobState.QUEUED, 4),
        summary("w1", "alice", "a", JobState.QUEUED, 3, gpus=2),
        summary("b1", "bob", "b", JobState.QUEUED, 5),
    ]
    alice = Principal("alice", frozenset({"a"}), scopes=frozenset({READ_SCOPE}))
    assert queue_quotas(alice, CFG, jobs) == [
        QueueQuota(
            queue="qa",
            gpu_quota=8,
            gpus_in_use=6,
            pending_count=2,
            team="a",
            pending=(PendingJob("w1", "alice", position=1, gpus=2),),
        )
    ]  # carol's job is counted, not listed
    lead = Principal("lead", frozenset({"a-admins"}), scopes=frozenset({READ_SCOPE}))
    assert [p.id for p in queue_quotas(lead, CFG, jobs)[0].pending] == ["w1", "w2"]
    root = Principal("root", admin=True)
    assert [(q.queue, q.pending_count, q.borrowed) for q in queue_quotas(root, CFG, jobs)] == [
        ("qa", 2, 0),
        ("qb", 1, 0),
    ]


def test_a_queue_borrows_what_the_backend_reported_at_most_what_it_holds() -> None:
    """The ledger cannot know what a queue borrows from its cohort: the backend's last report
    (Kueue's ClusterQueue status) says, bounded by the GPUs the ledger sees held."""
    jobs = [
        summary("r1", "alice", "a", JobState.RUNNING, 1, gpus=6),
        summary("b1", "bob", "b", JobState.RUNNING, 2, gpus=1),
    ]
    root = Principal("root", admin=True)
    reported = {
        "qa": QueueQuota("qa", gpu_quota=4, gpus_in_use=6, borrowed=2),
        "qb": QueueQuota("qb", gpu_quota=8, gpus_in_use=3, borrowed=3),  # the ledger lags
    }
    got = queue_quotas(root, CFG, jobs, reported)
    assert [(q.queue, q.gpu_quota, q.gpus_in_use, q.borrowed) for q in got] == [
        ("qa", 8, 6, 2),
        ("qb", 2, 1, 1),
    ]
    assert [q.borrowed for q in queue_quotas(root, CFG, jobs, {})] == [0, 0]


def test_a_queue_shows_what_its_cohort_lends_and_waits_in_kueues_order() -> None:
    """The backend's last report also says what the cohort lends a queue (never below 0) and
    Kueue's order of its waiting jobs; without one, the jobs' own queue positions order them,
    and the position a job shows is its place in that order."""
    jobs = [
        replace(summary("w1", "alice", "a", JobState.QUEUED, 1), queue_position=3),
        replace(summary("w2", "carol", "a", JobState.QUEUED, 2), queue_position=1),
        summary("w3", "alice", "a", JobState.QUEUED, 3),  # no position yet: last
        summary("b1", "bob", "b", JobState.QUEUED, 4),
    ]
    root = Principal("root", admin=True)
    ids = [[(p.id, p.position) for p in q.pending] for q in queue_quotas(root, CFG, jobs)]
    assert ids == [[("w2", 1), ("w1", 2), ("w3", 3)], [("b1", 1)]]
    kueue = (PendingJob("w3", "alice", 1, 1), PendingJob("w1", "alice", 2, 1))
    reported = {
        "qa": QueueQuota("qa", gpu_quota=8, lendable=4, pending=kueue),
        "qb": QueueQuota("qb", gpu_quota=2, lendable=-3),  # nonsense counts as none
    }
    got = queue_quotas(root, CFG, jobs, reported)
    assert [[p.id for p in q.pending] for q in got] == [["w3", "w1", "w2"], ["b1"]]
    assert [q.lendable for q in got] == [4, 0]
    assert [q.lendable for q in queue_quotas(root, CFG, jobs)] == [0, 0]
    alice = Principal("alice", frozenset({"a"}), scopes=frozenset({READ_SCOPE}))
    mine = queue_quotas(alice, CFG, jobs, reported)[0].pending  # carol's is counted, not listed
    assert [(p.id, p.position) for p in mine] == [("w3", 1), ("w1", 2)]


def test_the_job_list_escapes_everything() -> None:
    hostile = JobSummary(
        "j-1", "<script>alert(1)</script>", "a&b", None, '"q"', 1, 1, JobState.QUEUED
    )
    html = job_rows([hostile], "/services/aviflow-api/", '"><x')
    assert "<script>" not in html and "&lt;script&gt;" in html and "a&amp;b" in html
    assert (
        'value="&quot;&gt;&lt;x"' in html
        and 'action="/services/aviflow-api/jobs/j-1/cancel"' in html
    )


def _served() -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every API route the application serves."""
    app = make_app(SimpleNamespace(hub_auth=SimpleNamespace(base_url="/services/aviflow-api/")))  # type: ignore[arg-type]
    api = "/services/aviflow-api/api/v1"
    out = set()
    for rule in app.default_router.rules[0].target.rules:
        pattern = rule.matcher.regex.pattern.rstrip("$")
        if not pattern.startswith(api):
            continue
        path = (
            pattern.removeprefix(api).replace("([^/]+)", "{job_id}", 1).replace("([^/]+)", "{rank}")
        )
        alternatives = re.search(r"\(([a-z|]+)\)", path)
        paths = (
            [path.replace(alternatives.group(0), a) for a in alternatives.group(1).split("|")]
            if alternatives
            else [path]
        )
        for method in ("get", "post", "delete", "put", "patch"):
            if method in vars(rule.target):
                out |= {(method.upper(), p) for p in paths}
    return out


def test_the_origin_a_client_sends_is_a_bounded_claim_that_never_names_anyone() -> None:
    """alice's notebook may say which notebook and cell a job comes from; it cannot say the
    job is carol's (or team-b's): who submitted is recorded by the submit handler."""
    cell = {
        "kind": "notebook-cell",
        "notebook": "/home/alice/train.ipynb",
        "cell_id": "c-7",
        "execution_count": 3,
        "cell_hash": "sha256:" + "0" * 64,
    }
    hostile = {
        **cell,
        "user": "carol",
        "team": "team-b",
        "owner": "carol",
        "hub": {"user": "carol", "team": "team-b"},
        "namespace": "team-b",
        "via": "kubectl",
    }
    _, bundle = parse_submission(body(bundle={"origin": hostile}))
    assert bundle.origin == cell
    assert "carol" not in json.dumps(bundle.manifest()) and "team-b" not in json.dumps(
        bundle.manifest()
    )
    # each key of its type and size; an unknown one or a wrong one is dropped, not refused
    odd = {
        "kind": "k" * 65,
        "notebook": ["carol"],
        "cell_id": None,
        "execution_count": True,
        "cell_hash": {"user": "carol"},
    }
    assert parse_bundle({"origin": odd}).origin == {"cell_id": None}
    assert parse_bundle({"origin": {"execution_count": -1, "nb": "x"}}).origin == {}
    assert parse_bundle({"origin": {"notebook": "n" * 4096}}).origin == {"notebook": "n" * 4096}
    assert parse_bundle({"origin": {"notebook": "n" * 4097}}).origin == {}
    assert parse_bundle({}).origin == {}
    # the published document says the same
    documented = _document()["components"]["schemas"]["Origin"]["properties"]
    assert {k: v.get("maxLength", v.get("maximum")) for k, v in documented.items()} == {
        **{k: limit for k, (_, limit) in ORIGIN_CLAIM.items()},
        "namespace": None,
        "via": None,
    }


def test_the_openapi_document_describes_every_route_and_the_error_body() -> None:
    assert _served() == set(operations())
    doc = _document()
    error = doc["components"]["schemas"]["Error"]
    _, wire = wire_error(RequestError("x"), 400)
    assert set(error["required"]) == set(wire) and set(error["properties"]["error"]["enum"]) == set(
        WIRE_ERRORS
    )
    params = {
        (path, p.get("name") or p["$ref"].rsplit("/", 1)[-1])
        for path, item in doc["paths"].items()
        for op in item.values()
        if isinstance(op, dict)
        for p in op.get("parameters", [])
    }
    for path, name in [
        ("/jobs", "limit"),
        ("/jobs/{job_id}/events", "since"),
        ("/jobs/{job_id}/events", "limit"),
        ("/jobs/{job_id}/metrics", "since"),
        ("/jobs/{job_id}/metrics", "afterStep"),
        ("/jobs/{job_id}/metrics", "limit"),
        ("/jobs/{job_id}/logs/{rank}", "tail"),
        ("/jobs/{job_id}/logs/{rank}", "offset"),
        ("/usage", "by"),
        ("/usage", "format"),
    ]:
        assert (path, name) in params, (path, name)
    for op, items in (("/jobs/{job_id}/events", "events"), ("/jobs/{job_id}/metrics", "rows")):
        page = doc["paths"][op]["get"]["responses"]["200"]["content"]["application/json"]
        assert page["schema"]["required"] == [items, "next", "more"]
    # the page bounds it documents are the service's
    limit = doc["components"]["parameters"]["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, MAX_PAGE_ROWS, PAGE_ROWS)
    assert f"1 MiB of them as JSON ({PAGE_BYTES} bytes" in doc["info"]["description"]


def test_a_lane_refuses_when_its_workers_are_held_and_frees_them_when_the_calls_end() -> None:
    from aviflow_hub.service.lanes import Busy, Lane

    gate = threading.Event()
    lane = Lane("t", 2, "testing", wait=0.2)

    async def scenario() -> None:
        held = [asyncio.ensure_future(lane.run(gate.wait, 30)) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert lane.busy == 2
        with pytest.raises(Busy) as refused:
            await lane.run(lambda: "never")
        assert str(refused.value) == (
            "aviflow-api is busy testing: all 2 of its workers for that are still in earlier "
            "calls, none was free within 0.2 s; try again in 5 s"
        )
        status, body = wire_error(refused.value, 500)
        assert (status, body["error"]) == (503, "BackendUnavailable")
        held[0].cancel()  # the caller gives up; its call goes on and keeps its worker
        await asyncio.sleep(0.1)
        assert lane.busy == 2
        with pytest.raises(Busy):
            await lane.run(lambda: "never")
        gate.set()
        assert await held[1] is True
        await asyncio.sleep(0.1)
        assert lane.busy == 0
        assert await lane.run(lambda: "now") == "now"

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        lane.close()


def test_one_caller_holds_at_most_half_of_a_lane_and_the_rest_is_everyone_elses() -> None:
    from aviflow_hub.service.lanes import CALLER, Busy, Lane

    gate = threading.Event()
    lane = Lane("t", 4, "testing", wait=0.2)

    async def as_(who: str, fn: Any, *args: Any) -> Any:
        CALLER.set(who)  # as the request's handler does, in the request's own task
        return await lane.run(fn, *args)

    async def scenario() -> None:
        hers = [asyncio.ensure_future(as_("mallory", gate.wait, 30)) for _ in range(2)]
        await asyncio.sleep(0.1)
        assert (lane.busy, lane.callers()) == (2, {"mallory": 2})
        with pytest.raises(Busy) as refused:  # her third waits for one of hers, then 503
            await as_("mallory", lambda: "never")
        assert str(refused.value) == (
            "aviflow-api is busy testing for mallory: 2 calls of yours are still running (one "
            "user may hold 2 of its 4 workers for that), none ended within 0.2 s; try again "
            "in 5 s"
        )
        assert lane.callers() == {"mallory": 2}  # the refused call left nothing behind
        # everyone else still has the other half
        assert await as_("alice", lambda: "alice's") == "alice's"
        assert await lane.run(lambda: "the service's") == "the service's"  # no caller
        waiting = asyncio.ensure_future(as_("mallory", lambda: "after"))  # waits for hers
        await asyncio.sleep(0.05)
        gate.set()
        assert await waiting == "after"
        assert [await h for h in hers] == [True, True]
        await asyncio.sleep(0.1)
        assert (lane.busy, lane.callers()) == (0, {})

    try:
        asyncio.run(scenario())
    finally:
        gate.set()
        lane.close()
