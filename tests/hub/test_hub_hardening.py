"""Hostile and broken input against a real hub: each is a clear 4xx JSON error that creates
nothing and never makes a view fail, for the sender or anyone else.

One hub for the module (``real_hub``; alice in team-a, bob in team-b, root a hub admin).
``views_stay_up`` checks every listing a user has (jobs, queues, usage, the HTML job list and
report); ``nothing_created`` compares the run store before and after.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from aviflow.backends.hub import HubBackend
from aviflow.bundle import CodeBundle
from aviflow.errors import SpecError
from aviflow.spec import TrainJob
from aviflow.store import RunStore, append_line
from aviflow_hub.service.params import MAX_CURSOR
from aviflow_hub.service.submission import MAX_BODY_BYTES

pytestmark = pytest.mark.timeout(900)
ADMIN_PASSWORD = "aviflow-test-admin-password-0123456789"
SMALL = 4096  # what an error body stays under, whatever it was sent


def job_spec(name: str = "quick", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"script": "print('hi')", **spec},
    }


def post(hub: Any, token: str, body: Any) -> Any:
    """POST jobs with ``body`` (bytes as they are, anything else as JSON)."""
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return hub.call("POST", "jobs", token, data=data, headers={"Content-Type": "application/json"})


def refused(r: Any, status: int, error: str, *words: str) -> dict[str, Any]:
    assert r.headers["Content-Type"].startswith("application/json"), r.text[:500]
    assert len(r.content) < SMALL, len(r.content)
    body = r.json()
    assert (r.status_code, body["status"], body["error"]) == (status, status, error), body
    text = body["message"] + " ".join(body["problems"])
    for word in words:
        assert word in text, (word, body)
    return body


@pytest.fixture(scope="module")
def jobs(real_hub: Any, tokens: dict[str, str]) -> dict[str, str]:
    """A finished job each of alice and bob."""
    out = {}
    for user in ("alice", "bob"):
        r = post(real_hub, tokens[user], {"spec": job_spec()})
        assert r.status_code == 201, r.text
        out[user] = r.json()["id"]
    for user, job_id in out.items():
        assert finish(real_hub, tokens[user], job_id) == "SUCCEEDED", real_hub.log()[-3000:]
    return out


def said(hub: Any, job_id: str) -> str:
    """The job's events and its ranks' log tails as the run store has them (the hub's
    directory is gone after the test): for the message of a failed assertion."""
    run = RunStore(hub.run_root).get(job_id)
    events = [f"{e.type.value} {e.attempt} {e.message}" for e in run.events().items]
    tails = [f"rank {rank}: {run.log_tail(rank, 40)}" for rank in run.ranks()]
    return "\n".join([*events, *tails])


def finish(hub: Any, token: str, job_id: str) -> str:
    """Wait for the job to finish; its final state."""

    def final() -> str | None:
        state = hub.call("GET", f"jobs/{job_id}/status", token).json()["state"]
        return state if state in ("SUCCEEDED", "FAILED", "CANCELLED") else None

    return hub.until(final, f"{job_id} finishes", timeout=300)


def views_stay_up(hub: Any, tokens: dict[str, str]) -> None:
    for user, token in tokens.items():
        for path in ("jobs", "queues", "images", "usage", "usage?by=attempt"):
            r = hub.call("GET", path, token)
            assert r.status_code == 200, (user, path, r.text)
        for page in ("", "report"):
            r = hub.page(page, token)
            assert r.status_code == 200 and "<html>" in r.text, (user, page, r.text[:300])


@contextmanager
def nothing_created(hub: Any) -> Iterator[None]:
    def snapshot() -> list[
        str
    ]:  # job directories and the id index (<root>/<user>/<job>, .ids/<job>)
        return sorted(str(p.relative_to(hub.run_root)) for p in hub.run_root.glob("*/*"))

    before = snapshot()
    yield
    assert snapshot() == before


def test_a_lone_surrogate_in_a_job_name_is_a_spec_error(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    raw = json.dumps({"spec": job_spec("x")}).replace('"x"', '"bad\\ud800name"').encode()
    assert b"\\ud800" in raw
    with nothing_created(real_hub):
        refused(
            post(real_hub, tokens["alice"], raw), 400, "SpecError", "metadata.name", "surrogate"
        )
        # the same in other strings of the spec, and in a key
        env = json.dumps({"spec": job_spec(env={"K": "x"})}).replace('"x"', '"\\udfff"').encode()
        refused(post(real_hub, tokens["alice"], env), 400, "SpecError", "spec.env.K")
        key = json.dumps({"spec": job_spec(env={"K": "v"})}).replace('"K"', '"\\ud800"').encode()
        refused(post(real_hub, tokens["alice"], key), 400, "SpecError")
    views_stay_up(real_hub, tokens)


def test_deeply_nested_and_too_large_bodies(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    with nothing_created(real_hub):
        deep = b'{"spec": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        refused(post(real_hub, tokens["alice"], deep), 400, "RequestError", "nested too deeply")
        nested: Any = "leaf"
        for _ in range(60):
            nested = [nested]
        body = {"spec": job_spec(), "bundle": {"origin": {"deep": nested}}}
        refused(post(real_hub, tokens["alice"], body), 400, "RequestError", "nested more than 32")
        body = {"spec": {**job_spec(), "metadata": {"name": "x", "labels": {"a": nested}}}}
        refused(post(real_hub, tokens["alice"], body), 400, "SpecError", "nested more than 32")
        for raw in (b"not json", b"\xff\xfe{}", b"[1, 2]", b'"text"', b""):
            refused(post(real_hub, tokens["alice"], raw), 400, "RequestError")
        huge = b'{"spec": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
        refused(post(real_hub, tokens["alice"], huge), 413, "RequestError", str(MAX_BODY_BYTES))
    views_stay_up(real_hub, tokens)


BAD_NAMES = [
    ".",
    "..",
    "a/../b",
    "../escape.py",
    "/etc/passwd",
    "",
    "a\x00b",
    "\ud800.py",
    "a//b",
    "./a",
    "a/",
    "MANIFEST.json",
    ".aviflow-job.yaml",
    "x" * 300,
]


def test_bundle_file_names_must_be_plain_relative_paths(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    content = base64.b64encode(b"print('x')\n").decode()
    with nothing_created(real_hub):
        for name in BAD_NAMES:
            body = {"spec": job_spec(), "bundle": {"files": {name: content}}}
            refused(post(real_hub, tokens["alice"], body), 400, "RequestError", "bundle.files")
        for files, word in (
            ({"a": content, "a/b": content}, "inside the file"),
            ({"a.py": "not base64!"}, "not base64"),
            ({"a.py": 1}, "base64"),
        ):
            refused(
                post(real_hub, tokens["alice"], {"spec": job_spec(), "bundle": {"files": files}}),
                400,
                "RequestError",
                word,
            )
        body = {"spec": job_spec(), "bundle": {"files": {"a.py": content}, "entrypoint": "b.py"}}
        refused(post(real_hub, tokens["alice"], body), 400, "RequestError", "entrypoint")
    views_stay_up(real_hub, tokens)


def test_query_parameters_are_checked_and_bounded(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    job = jobs["alice"]
    bad = {
        "jobs": [
            *("limit=-1", "limit=abc", "limit=1e3", "limit=100001", "limit=", "limit=%201"),
            *("user=", f"user={'u' * 256}"),
        ],
        f"jobs/{job}/events": ["since=-1", "since=x", f"since={MAX_CURSOR + 1}", "since=1.5"],
        f"jobs/{job}/metrics": ["since=-5", "afterStep=-1", "afterStep=ten", f"afterStep={10**30}"],
        f"jobs/{job}/logs/0": [
            "tail=-1",
            "tail=x",
            "tail=100001",
            "offset=-1",
            f"offset={MAX_CURSOR + 1}",
            "tail=1&offset=0",
        ],
        f"jobs/{job}/logs/abc": [""],
        f"jobs/{job}/logs/-1": [""],
        f"jobs/{job}/logs/4096": [""],
        f"jobs/{job}/logs/1": [""],  # a rank the job does not have (it has one)
        f"jobs/{job}/logs/4095": ["tail=0"],
        f"jobs/{job}/logs/{'9' * 40}": [""],
        "usage": ["by=month", "format=xml"],
    }
    for path, queries in bad.items():
        for query in queries:
            r = real_hub.call("GET", f"{path}?{query}", tokens["alice"])
            assert r.status_code == 400, (path, query, r.text)
            refused(r, 400, "RequestError")
    refused(
        real_hub.call("GET", f"jobs/{job}/logs/4095?tail=0", tokens["alice"]),
        400,
        "RequestError",
        f"job '{job}' has no rank 4095: it has rank 0 only",
    )
    refused(
        real_hub.call("GET", f"jobs/{job}/logs/0?tail=9999999", tokens["alice"]),
        400,
        "RequestError",
        "tail must be a whole number from 0 to 100000",
    )
    good = [
        "jobs?limit=0",
        "jobs?limit=100000",
        f"jobs/{job}/events?since={2**40}",
        f"jobs/{job}/metrics?since=0&afterStep={MAX_CURSOR}",
        f"jobs/{job}/logs/0?tail=0",
        f"jobs/{job}/logs/0?tail=100000",
        f"jobs/{job}/logs/0?offset={MAX_CURSOR}",
    ]
    for path in good:
        assert real_hub.call("GET", path, tokens["alice"]).status_code == 200, path
    assert real_hub.call("GET", "jobs?limit=0", tokens["alice"]).json() == {"jobs": []}

    # one user's jobs, within what the caller may see: alice's own; nobody else's
    def listed(who: str) -> list[tuple[str, str]]:
        rows = real_hub.call("GET", f"jobs?user={who}", tokens["alice"]).json()["jobs"]
        return [(j["id"], j["user"]) for j in rows]

    assert (job, "alice") in listed("alice") and {u for _, u in listed("alice")} == {"alice"}
    assert listed("bob") == [] and listed("nobody") == []  # bob's job is not alice's to see
    events = real_hub.call("GET", f"jobs/{job}/events?since={2**40}", tokens["alice"]).json()
    assert events["events"] == []
    # Past what a file can hold the run store's seek fails (EINVAL): a 400, never a 500.
    # (Once aviflow.store.read_lines clamps the cursor to the file's size, a 200.)
    for part in ("events", "metrics"):
        r = real_hub.call("GET", f"jobs/{job}/{part}?since={MAX_CURSOR}", tokens["alice"])
        assert r.status_code == 200 or refused(r, 400, "RequestError", "past the end"), r.text


def test_routes_that_do_not_exist_answer_json_404(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    for path in (
        "nope",
        "jobs/x/y/z",
        f"jobs/{jobs['alice']}/nope",
        "jobs/",
        "queues/x",
        f"jobs/{jobs['alice']}/logs/0/x",
    ):
        for token in (tokens["alice"], None):
            refused(real_hub.call("GET", path, token), 404, "RequestError", "openapi.json")
    refused(
        real_hub.call("GET", "nope", tokens["alice"]),
        404,
        "RequestError",
        "GET /services/aviflow-api/api/v1/nope",
    )
    for job_id in ("NOT-AN-ID", "a%00b", "x" * 100, "tiny-1%0A"):
        for part in ("", "/events", "/logs/0"):
            refused(
                real_hub.call("GET", f"jobs/{job_id}{part}", tokens["alice"]), 404, "JobNotFound"
            )
    r = real_hub.page("no/such/page", tokens["alice"])
    assert (r.status_code, r.json()["error"]) == (404, "RequestError")
    refused(real_hub.call("DELETE", f"jobs/{jobs['alice']}", tokens["alice"]), 405, "RequestError")
    refused(real_hub.call("POST", "queues", tokens["alice"], json={}), 405, "RequestError")


def test_unknown_keys_are_named_with_a_suggestion(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    with nothing_created(real_hub):
        cases = [
            ({"spec": job_spec(), "bundel": {}}, "'bundel' in the request; did you mean 'bundle'?"),
            ({"specs": job_spec()}, "'specs' in the request; did you mean 'spec'?"),
            (
                {"spec": job_spec(), "bundle": {"file": {}}},
                "'file' in bundle; did you mean 'files'?",
            ),
            ({"spec": job_spec(), "bundle": {"entryPoint": "a"}}, "did you mean 'entrypoint'?"),
            (
                {"spec": job_spec(), "bundle": {"accelerate": "a"}},
                "did you mean 'accelerateConfig'?",
            ),
            ({"spec": job_spec(), "zzz": 1}, "valid keys: spec, bundle"),
            ({"bundle": {}}, 'no "spec"'),
        ]
        for body, words in cases:
            refused(post(real_hub, tokens["alice"], body), 400, "RequestError", words)


def test_error_bodies_never_echo_large_inputs(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    big = "x" * 10_000_000
    with nothing_created(real_hub):
        refused(
            post(real_hub, tokens["alice"], {"spec": job_spec(nodes=big)}),
            400,
            "SpecError",
            "spec.nodes",
        )
        refused(
            post(real_hub, tokens["alice"], {"spec": {**job_spec(), "metadata": {"name": big}}}),
            400,
            "SpecError",
            "metadata.name",
        )
        refused(post(real_hub, tokens["alice"], {"spec": job_spec(), big: 1}), 400, "RequestError")
        refused(
            post(real_hub, tokens["alice"], {"spec": job_spec(), "bundle": {"files": {big: ""}}}),
            400,
            "RequestError",
        )
        refused(post(real_hub, tokens["alice"], {"spec": job_spec(**{big: 1})}), 400, "SpecError")
    refused(
        real_hub.call("GET", f"jobs?limit={'1' * 100_00}", tokens["alice"]), 400, "RequestError"
    )


def test_resume_from_a_job_the_caller_may_not_read_is_404(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    with nothing_created(real_hub):
        for job_id in (jobs["bob"], "no-such-job-1234"):
            body = {"spec": job_spec(resumeFrom={"job": job_id, "step": 0})}
            refused(post(real_hub, tokens["alice"], body), 404, "JobNotFound", job_id)
    # the owner may resume from it; so may a hub admin
    for who in ("bob", "root"):
        r = post(
            real_hub,
            tokens[who],
            {"spec": job_spec(queue="queue-b", resumeFrom={"job": jobs["bob"], "step": 0})},
        )
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        assert finish(real_hub, tokens[who], job_id) == "SUCCEEDED", said(real_hub, job_id)


def test_unreadable_jobs_and_ledger_rows_are_skipped(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    # a job written straight into the run store, whose meta.json is garbage: made whole in a
    # scratch store, broken there, then moved in and indexed as RunStore.create does
    store = RunStore(real_hub.run_root)
    scratch = RunStore(real_hub.run_root.parent / "scratch").create(
        TrainJob.from_dict(job_spec("broken")), {}, "alice", team="team-a"
    )
    scratch.meta_path.write_text("{not json")
    broken = store.user_dir("alice") / scratch.id
    scratch.path.rename(broken)
    (store.index_dir / scratch.id).symlink_to(f"../alice/{scratch.id}")
    append_line(store.index_log, {"id": scratch.id, "user": "alice", "time": time.time()})
    assert scratch.id in store.ids()
    # and a ledger row no reader can parse, of alice's
    ledger = sqlite3.connect(real_hub.run_root.parent / "aviflow-ledger.sqlite")
    with ledger:
        ledger.execute(
            "INSERT INTO aviflow_jobs (job_id, name, user, team, queue, nodes, gpus, submitted,"
            " updated, state, origin) VALUES ('garbage-row', 'g', 'alice', 'team-a', 'queue-a',"
            " 1, 1, 0, 0, 'EXPLODED', '[not an object')"
        )
    ledger.close()
    real_hub.until(
        lambda: f"job {scratch.id} cannot be read" in real_hub.log(), "the feed reports the job"
    )
    views_stay_up(real_hub, tokens)
    real_hub.until(
        lambda: "ledger row of job garbage-row cannot be read" in real_hub.log(),
        "the row is reported",
    )
    for token in tokens.values():
        listed = [j["id"] for j in real_hub.call("GET", "jobs", token).json()["jobs"]]
        assert scratch.id not in listed and "garbage-row" not in listed
    for job_id in (scratch.id, "garbage-row"):
        refused(real_hub.call("GET", f"jobs/{job_id}", tokens["alice"]), 404, "JobNotFound")
    # the feed goes on for everything else
    r = post(real_hub, tokens["alice"], {"spec": job_spec("after")})
    assert r.status_code == 201
    job_id = r.json()["id"]
    assert finish(real_hub, tokens["alice"], job_id) == "SUCCEEDED", said(real_hub, job_id)
    real_hub.until(
        lambda: (
            real_hub.call("GET", "jobs", tokens["alice"]).json()["jobs"][0]["state"] == "SUCCEEDED"
        ),
        "the next job reaches the ledger",
    )


def test_a_spec_error_crosses_http_as_a_spec_error(
    real_hub: Any, tokens: dict[str, str], tmp_path: Path
) -> None:
    url = f"{real_hub.url}/services/aviflow-api/"
    hub = HubBackend(url, token=tokens["alice"])
    valid = TrainJob.from_dict(job_spec())
    bad = valid.model_copy(update={"spec": valid.spec.model_copy(update={"nodes": 0})})  # unchecked
    with pytest.raises(SpecError) as local:
        TrainJob.from_dict(bad.to_dict())
    with nothing_created(real_hub), pytest.raises(SpecError) as remote:
        hub.submit(bad, CodeBundle({}))
    assert remote.value.problems == local.value.problems and len(local.value.problems) == 1
    with nothing_created(real_hub), pytest.raises(SpecError) as queue:
        hub.submit(TrainJob.from_dict(job_spec(queue="nope")), CodeBundle({}))
    assert queue.value.problems == ["spec.queue: no queue 'nope'; your queues: queue-a"]
    # the CLI exits 2 (bad usage or spec), as with a local spec error
    path = tmp_path / "bad.yaml"
    path.write_text(TrainJob.from_dict(job_spec(queue="nope")).to_yaml())
    env = {"AVIFLOW_API_URL": url, "JUPYTERHUB_API_TOKEN": tokens["alice"], "PATH": "/usr/bin:/bin"}
    with nothing_created(real_hub):
        done = subprocess.run(
            [sys.executable, "-m", "aviflow", "--backend", "hub", "submit", str(path)],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "spec.queue: no queue 'nope'" in done.stderr


# A job's own code, attacking from inside its directory (the local backend runs it as the
# hub's user, so the files are really the job's): its rank log made a symlink to the hub's
# config, a rank it does not have pointing at /etc/passwd, a FIFO, a checkpoint marker
# carrying markup, metric rows of the wrong types.
PLANTING_SCRIPT = """
import json, os
from aviflow.store import CHECKPOINT_MARKER
from aviflow.tracking import run_dir
run = run_dir()
print("planting", flush=True)
os.symlink(os.environ["HUB_CONFIG"], run.logs_dir / "link.tmp")
os.replace(run.logs_dir / "link.tmp", run.rank_log(0))
os.symlink("/etc/passwd", run.rank_log(4000))
os.mkfifo(run.rank_log(4001))
step = run.checkpoint_dir(1)
step.mkdir()
(step / CHECKPOINT_MARKER).write_text(
    json.dumps({"step": 1, "attempt": "<img src=x onerror=alert(1)>"})
)
with open(run.metrics_path, "a") as f:
    f.write(json.dumps({"step": "5", "time": 1.0, "values": {"loss": 1.0}}) + "\\n")
    f.write(json.dumps({"step": 6, "time": 2.0, "attempt": 1, "values": {"loss": 0.5}}) + "\\n")
"""


def test_a_job_planting_symlinks_fifos_and_markup_gets_nothing_served(
    real_hub: Any, tokens: dict[str, str]
) -> None:
    spec = job_spec(
        "planter", script=PLANTING_SCRIPT, env={"HUB_CONFIG": str(real_hub.config_path)}
    )
    r = post(real_hub, tokens["alice"], {"spec": spec})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert finish(real_hub, tokens["alice"], job_id) == "SUCCEEDED", real_hub.log()[-3000:]
    config = real_hub.config_path.read_text()
    get = lambda path: real_hub.call("GET", f"jobs/{job_id}/{path}", tokens["alice"])  # noqa: E731
    # the symlinked log of its one rank is refused with the reason, never followed
    body = refused(get("logs/0?tail=50"), 400, "RequestError", "rank 0's log", "symlink")
    assert config[:40] not in json.dumps(body)
    # ranks it does not have are not listed, and not read
    assert get("logs").json() == {"ranks": [0]}
    for rank in (4000, 4001):
        refused(get(f"logs/{rank}?tail=5"), 400, "RequestError", f"has no rank {rank}")
    # the marker with markup is no checkpoint; the mistyped metric row is skipped
    assert get("checkpoints").json() == {"checkpoints": []}
    assert [row["step"] for row in get("metrics").json()["rows"]] == [6]
    # the job's page shows none of it, and says why the log is not shown
    page = real_hub.page(f"jobs/{job_id}", tokens["alice"])
    assert page.status_code == 200, page.text[:500]
    assert "not shown" in page.text and "symlink" in page.text
    assert "<img" not in page.text and config[:40] not in page.text and "root:x:0" not in page.text
    views_stay_up(real_hub, tokens)


def test_a_hub_user_named_like_a_platform_owner_is_refused(
    real_hub: Any, tokens: dict[str, str]
) -> None:
    # kubectl TrainJobs are owned by kubectl:<username>: no hub user may be called that (an
    # admin can still make one in the hub; aviflow-api refuses it)
    admin = {"Authorization": f"token {tokens['root']}"}
    users = f"{real_hub.url}/hub/api/users/kubectl:alice"
    made = requests.post(users, headers=admin, timeout=60)
    assert made.status_code == 201, made.text
    made = requests.post(f"{users}/tokens", headers=admin, json={"note": "test"}, timeout=60)
    assert made.status_code == 201, made.text
    token = made.json()["token"]
    for path in ("jobs", "queues"):
        refused(real_hub.call("GET", path, token), 403, "AccessDenied", "reserved for the platform")
