"""aviflow-api's own pages: the job list (queue bars, badges, positions, sizes, GPU-hours) and
a page per job (the notebook panel's sections, logs, cancel form).

The pure renderers (:mod:`aviflow_hub.service.page_html`) are checked on exact fragments; then
one real hub (``real_hub``: alice in team-a, bob in team-b, lead admin of team-a, root hub
admin; one GPU slot) runs alice's job, whose name is hostile HTML and which logs a metric,
saves a checkpoint marker and prints a line, while bob's job waits behind it. Every response
(pages, error pages, JSON, redirects) carries the exact Content-Security-Policy and
``X-Content-Type-Options`` of :data:`SECURITY_HEADERS`.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

import pytest
import requests

from aviflow import api
from aviflow.backends.hub import HubBackend
from aviflow.records import FailureInfo, JobState, JobSummary, PendingJob, QueueQuota
from aviflow.views.html import badge, duration
from aviflow.views.snapshot import JobSnapshot, RankState
from aviflow_hub.service.page_html import (
    error_page_html,
    job_detail,
    job_page_html,
    job_row,
    logs_html,
    queue_bar,
    queues_html,
)

BASE = "/services/aviflow-api/"
HOSTILE = "<script>alert(\"x\")&'y'"
SAFE = escape(HOSTILE)
pytestmark = pytest.mark.timeout(600)  # &lt;script&gt;alert(&quot;x&quot;)&amp;&#x27;y&#x27;
# Every response of aviflow-api: no script may run in its pages, whatever a field holds.
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; base-uri 'none'; frame-ancestors 'self'",
    "X-Content-Type-Options": "nosniff",
}


def secured(r: requests.Response) -> bool:
    return {k: r.headers.get(k) for k in SECURITY_HEADERS} == SECURITY_HEADERS


# -- pure renderers -------------------------------------------------------------------------------


def summary(**kw: Any) -> JobSummary:
    base: dict[str, Any] = {
        "id": "j-1",
        "name": "tiny",
        "user": "alice",
        "team": "team-a",
        "queue": "queue-a",
        "nodes": 2,
        "gpus_per_node": 4,
        "state": JobState.RUNNING,
        "submitted": 1000.0,
        "gpu_seconds": 5400.0,
    }
    return JobSummary(**{**base, **kw})


def test_a_queue_bar_shows_use_quota_pending_and_borrowed() -> None:
    q = QueueQuota(
        "queue-a",
        gpu_quota=4,
        gpus_in_use=6,
        pending_count=1,
        team="team-a",
        borrowed=2,
        pending=(PendingJob("w-1", "<b>", position=1, gpus=2),),
    )
    # the sidebar's bar (aviflow.views.queue_bar, the same samples as its TypeScript mirror)
    assert queue_bar(q) == (
        '<div class="queue" data-queue="queue-a"><b>team-a</b> <code>queue-a</code>'
        '<span class="bar"><span class="used" style="width:50%"></span>'
        '<span class="borrowed" style="width:25%"></span>'
        '<span class="pending" style="width:25%"></span>'
        '<span class="quota" style="left:50%"></span></span>'
        "<span>6 / 4 GPUs · 1 pending · 2 borrowed</span>"
        '<div class="detail">waiting: 1. &lt;b&gt; <code>w-1</code> (2 GPUs)</div></div>'
    )
    unlimited = QueueQuota("q", gpu_quota=None, gpus_in_use=0, lendable=3)
    assert (
        '<span class="used" style="width:0%"></span>' in queue_bar(unlimited)
        and "<span>0 GPUs · no quota limit · 3 idle in cohort</span>" in queue_bar(unlimited)
        and 'class="quota"' not in queue_bar(unlimited)
    )
    assert "You are in no team" in queues_html([])


def test_a_job_row_has_badge_link_size_elapsed_gpu_hours_and_cancel_form() -> None:
    row = job_row(summary(), BASE, "tok", now=1000.0 + 3725)
    assert row == (
        '<tr data-job="j-1"><td><a href="/services/aviflow-api/jobs/j-1">tiny</a><br>'
        "<code>j-1</code></td><td>alice</td><td>team-a / queue-a</td>"
        f"<td>{badge('RUNNING')}</td><td>2&times;4 GPUs</td>"
        '<td class="num">1h 02m</td><td class="num">1.500</td><td>'
        '<form method="post" action="/services/aviflow-api/jobs/j-1/cancel">'
        '<input type="hidden" name="_xsrf" value="tok">'
        '<button type="submit">Cancel</button></form></td></tr>'
    )
    done = job_row(
        summary(state=JobState.SUCCEEDED, finished=1042.0, team=None), BASE, "t", now=9e9
    )
    assert '<td class="num">42s</td>' in done and "<form" not in done
    assert "<td>queue-a</td>" in done


def test_the_row_says_why_a_job_waits_and_where_it_failed() -> None:
    queued = summary(state=JobState.QUEUED, queue_position=3, message='quota "full" <now>')
    assert job_detail(queued, 0.0) == (
        '<div class="detail">position 3 in the queue: quota &quot;full&quot; &lt;now&gt;</div>'
    )
    assert job_detail(summary(state=JobState.QUEUED), 0.0) == '<div class="detail">queued</div>'
    failure = FailureInfo(rank=1, node=0, exception="ValueError", message="<boom>")
    assert job_detail(summary(state=JobState.FAILED, failure=failure), 0.0) == (
        '<div class="detail failed">first failure: rank 1 on node 0 &mdash; '
        "ValueError: &lt;boom&gt;</div>"
    )
    assert job_detail(summary(state=JobState.CANCELLED, message="cancelled by bob"), 0.0) == (
        '<div class="detail">cancelled by bob</div>'
    )
    assert job_detail(summary(message="step 5"), 0.0) == ""  # a running job's message is noise


def test_hostile_text_is_escaped_everywhere() -> None:
    row = job_row(summary(name=HOSTILE, user='"u"', queue="<q>"), BASE, '"><x', now=2000.0)
    assert "<script>" not in row and f">{SAFE}</a>" in row
    assert "<td>&quot;u&quot;</td>" in row and "team-a / &lt;q&gt;" in row
    assert 'value="&quot;&gt;&lt;x"' in row
    page = error_page_html(404, "JobNotFound", "no job '<x>'", BASE)
    assert "<h1>404 JobNotFound</h1><p>no job &#x27;&lt;x&gt;&#x27;</p>" in page


def test_logs_show_the_first_ranks_with_a_note() -> None:
    assert logs_html([], 0) == "<p>No rank has written a log yet.</p>"
    html = logs_html([(0, "a<b"), (1, "")], 9)
    assert html.startswith("<p>Showing the logs of 2 of 9 ranks.</p>")
    assert '<div class="rank-log" data-rank="0"><h3>rank 0</h3>' in html and "a&lt;b" in html
    assert "(no output yet)" in html


def test_the_job_page_is_the_panels_sections() -> None:
    snap = JobSnapshot(
        id="j-1",
        name=HOSTILE,
        state=JobState.RUNNING,
        attempt=1,
        message="",
        queue_position=None,
        nodes=1,
        gpus_per_node=2,
        submitted=1000.0,
        finished=None,
        now=1065.0,
        gpu_hours=0.036,
        ranks=(RankState(0, 0, "RUNNING"), RankState(1, 0, "STARTING")),
        failure=None,
        metrics={"loss": [(1, 0.5), (2, 0.25)]},
    )
    page = job_page_html(snap, summary(name=HOSTILE), [(0, "hi")], 2, base=BASE, xsrf="t")
    assert "<script>" not in page and f"<title>{SAFE} · Aviflow job</title>" in page
    assert f"<h1>Aviflow job {SAFE}</h1>" in page
    assert "data-metric='loss'" in page and "data-rank='1'" in page
    assert "elapsed 1m 05s" in page and "no checkpoints yet" in page
    assert '<input type="hidden" name="back" value="job">' in page
    assert '<a href="/services/aviflow-api/">&larr; all jobs</a>' in page
    assert "team-a / queue-a" in page
    finished = job_page_html(
        JobSnapshot(**{**vars(snap), "state": JobState.SUCCEEDED, "metrics": {}}),
        summary(),
        [],
        0,
        base=BASE,
        xsrf="t",
    )
    assert "<form" not in finished and "no metrics logged yet" in finished
    assert "http-equiv" not in page + finished
    # a view that has not read all the job logged says so and reads on (no script: a reload)
    reading = job_page_html(
        JobSnapshot(**{**vars(snap), "metric_rows": 50_000, "catching_up": True}),
        summary(),
        [],
        0,
        base=BASE,
        xsrf="t",
    )
    assert '<head><meta charset="utf-8"><meta http-equiv="refresh" content="2"><title>' in reading
    assert "reading the logged metrics: 50000 rows so far, more to come" in reading


# -- on a real hub --------------------------------------------------------------------------------

WORKER = """
import json, time, aviflow
from aviflow.store import CHECKPOINT_MARKER, atomic_write
from aviflow.tracking import run_dir
aviflow.log({"loss": 0.5}, step=1)
aviflow.log({"loss": 0.25}, step=2)
ckpt = run_dir().checkpoint_dir(2)
ckpt.mkdir(parents=True, exist_ok=True)
atomic_write(ckpt / CHECKPOINT_MARKER, json.dumps({"step": 2, "time": time.time(), "attempt": 1}))
print("hello from rank 0 <b>&", flush=True)
time.sleep(900)
"""


def train_job(name: str, script: str) -> dict[str, Any]:
    return {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": name},
        "spec": {"script": script},
    }


def client(hub: Any, token: str) -> HubBackend:
    return HubBackend(f"{hub.url}{BASE}", token=token)


def row_of(html: str, job_id: str) -> str:
    found = re.search(rf'<tr data-job="{re.escape(job_id)}">.*?</tr>', html)
    return found.group(0) if found else ""


@pytest.fixture(scope="module")
def jobs(real_hub: Any, tokens: dict[str, str]) -> dict[str, str]:
    """alice's job runs (the only GPU slot) and logs; bob's waits behind it."""
    a = api.submit(train_job(HOSTILE, WORKER), backend=client(real_hub, tokens["alice"])).id

    def running() -> bool:
        return real_hub.call("GET", f"jobs/{a}/status", tokens["alice"]).json()["state"] in (
            "STARTING",
            "RUNNING",
        )

    real_hub.until(running, "alice's job starts", timeout=300)
    sleeper = "import time\ntime.sleep(900)\n"
    b = api.submit(train_job("waiter", sleeper), backend=client(real_hub, tokens["bob"])).id
    return {"alice": a, "bob": b}


def test_the_home_page_lists_what_the_caller_may_see(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    a, b = jobs["alice"], jobs["bob"]

    def alice_running() -> str | None:
        html = real_hub.page("", tokens["alice"]).text
        ok = "data-state='RUNNING'" in row_of(html, a) and "<span>1 / 4 GPUs</span>" in html
        return html if ok else None

    html = real_hub.until(alice_running, "alice's page shows her job running", timeout=120)
    assert "<h1>Aviflow jobs of alice</h1>" in html and "<script>" not in html
    row = row_of(html, a)
    assert f'<a href="{BASE}jobs/{a}">{SAFE}</a><br><code>{a}</code>' in row
    assert "<td>alice</td><td>team-a / queue-a</td>" in row and "<td>1&times;1 GPUs</td>" in row
    assert re.search(r'<td class="num">\d+\.\d{3}</td>', row)  # GPU-hours (exact: below)
    assert f'<form method="post" action="{BASE}jobs/{a}/cancel">' in row
    assert b not in html and 'data-queue="queue-b"' not in html  # bob's job and queue
    assert (
        '<div class="queue" data-queue="queue-a"><b>team-a</b> <code>queue-a</code>' in html
        and "<span>1 / 4 GPUs</span>" in html
    )
    assert f'<a href="{BASE}report">Usage report</a>' in html
    report = real_hub.page("report", tokens["alice"])
    assert report.status_code == 200 and "GPU-hours by team" in report.text and secured(report)
    assert f'<a href="{BASE}api/v1/openapi.json">API (OpenAPI)</a>' in html
    lead = real_hub.page("", tokens["lead"]).text
    assert row_of(lead, a) and b not in lead
    root = real_hub.page("", tokens["root"]).text
    assert 0 < root.index(f'data-job="{b}"') < root.index(f'data-job="{a}"')  # newest first


def test_a_queued_job_shows_its_position_and_reason(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    b = jobs["bob"]
    status = real_hub.call("GET", f"jobs/{b}/status", tokens["bob"]).json()
    assert (status["state"], status["queuePosition"]) == ("QUEUED", 1) and status["message"]
    expected = f'<div class="detail">position 1 in the queue: {escape(status["message"])}<'

    def shown() -> str | None:
        html = real_hub.page("", tokens["bob"]).text
        return html if expected in row_of(html, b) else None

    html = real_hub.until(shown, "bob's page shows where his job waits and why")
    assert "data-state='QUEUED'" in row_of(html, b) and jobs["alice"] not in html
    assert "<span>0 / 4 GPUs · 1 pending</span>" in html
    assert f'<div class="detail">waiting: 1. bob <code>{b}</code> (1 GPUs)</div>' in html
    page = real_hub.page(f"jobs/{b}", tokens["bob"])
    assert page.status_code == 200 and "no metrics logged yet" in page.text
    assert "position 1 in the queue" in page.text
    # when it will start and why it waits, in numbers: the supervisor's forecast, in the
    # words of aviflow.views.waiting, on the list and on its page; alice's job holds the only
    # slot with no time limit, and only bob's own queue's numbers show, no other job's name
    words = (
        "<div class='aviflow-start'>start unknown: a job ahead has no time limit</div>"
        "<div class='aviflow-wait'>queue queue-b: quota 4 GPUs, holds 0 (0 borrowed), 0 idle in "
        "the cohort to borrow; no job ahead</div>"
    )

    def estimated() -> tuple[str, str] | None:
        listed, one = (
            real_hub.page("", tokens["bob"]).text,
            real_hub.page(f"jobs/{b}", tokens["bob"]),
        )
        return (listed, one.text) if words in row_of(listed, b) and words in one.text else None

    listed, page_text = real_hub.until(estimated, "bob's list and page show the estimate", 60)
    for html_text in (listed, page_text):
        assert jobs["alice"] not in html_text and SAFE not in html_text and "alice" not in html_text


def test_the_job_page_shows_charts_ranks_checkpoints_and_logs(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    a = jobs["alice"]

    def complete() -> str | None:
        r = real_hub.page(f"jobs/{a}", tokens["alice"])
        assert r.status_code == 200, r.text[:2000]
        ready = "data-metric='loss'" in r.text and "hello from rank 0 &lt;b&gt;&amp;" in r.text
        return r.text if ready and "data-step='2'" in r.text else None

    html = real_hub.until(complete, "the job page shows the metric, checkpoint and log", 120)
    assert "<script>" not in html and f"<h1>Aviflow job {SAFE}</h1>" in html
    page = real_hub.page(f"jobs/{a}", tokens["alice"])
    assert page.headers["Content-Type"] == "text/html; charset=utf-8" and secured(page)
    for route in (f"jobs/{a}/status", "jobs/NOT-AN-ID/status", "no/such/route"):  # JSON too
        r = real_hub.call("GET", route, tokens["alice"])
        assert r.headers["Content-Type"] == "application/json" and secured(r), (route, r.headers)
    assert "data-state='RUNNING'" in html and "<span>1&times;1 GPUs</span>" in html
    assert "data-points='2'" in html  # loss at steps 1 and 2
    assert "<tr class='aviflow-checkpoint' data-step='2'><td>2</td><td>1</td>" in html
    assert "<span class='aviflow-rank' data-rank='0'>rank 0 " in html
    assert '<div class="rank-log" data-rank="0"><h3>rank 0</h3>' in html
    assert f'<form method="post" action="{BASE}jobs/{a}/cancel">' in html
    assert (
        f'<a href="{BASE}">&larr; all jobs</a> &middot; user alice &middot; team-a / queue-a'
        in html
    )
    for viewer in ("lead", "root"):
        assert real_hub.page(f"jobs/{a}", tokens[viewer]).status_code == 200, viewer
    for viewer, job in (("bob", a), ("alice", jobs["bob"]), ("lead", jobs["bob"])):
        r = real_hub.page(f"jobs/{job}", tokens[viewer])
        assert r.status_code == 404 and r.headers["Content-Type"].startswith("text/html")
        assert "<h1>404 JobNotFound</h1>" in r.text and "<script>" not in r.text
        assert secured(r), r.headers  # an error page
    assert real_hub.page("jobs/NOT-AN-ID", tokens["alice"]).status_code == 404
    anonymous = requests.get(f"{real_hub.url}{BASE}jobs/{a}", allow_redirects=False, timeout=60)
    assert anonymous.status_code == 302 and secured(anonymous)  # to the hub's OAuth login


def test_cancel_from_the_job_page_then_exact_usage(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    a = jobs["alice"]
    s = requests.Session()
    login = f"{real_hub.url}/hub/login"
    form = {"username": "alice", "password": "aviflow-test-pw"}
    xsrf = real_hub.xsrf_from(s.get(login, timeout=60).text)
    assert s.post(login, data={**form, "_xsrf": xsrf}, allow_redirects=False, timeout=60).ok
    page = s.get(f"{real_hub.url}{BASE}jobs/{a}", timeout=60)  # through the OAuth dance
    assert page.status_code == 200 and 'name="back" value="job"' in page.text
    r = s.post(
        f"{real_hub.url}{BASE}jobs/{a}/cancel",
        data={"_xsrf": real_hub.xsrf_from(page.text), "back": "job"},
        allow_redirects=False,
        timeout=120,
    )
    assert (r.status_code, r.headers["Location"]) == (302, f"{BASE}jobs/{a}")

    def ended() -> list[dict[str, Any]] | None:  # the cancel is asked for; the job ends after
        events = real_hub.call("GET", f"jobs/{a}/events", tokens["alice"]).json()["events"]
        return events if events[-1]["type"] == "CANCELLED" else None

    events = real_hub.until(ended, "the job ends", 60)
    assert events[-1]["message"] == "cancelled by alice"
    real_hub.call("POST", f"jobs/{jobs['bob']}/cancel", tokens["bob"], json={})

    def settled() -> str | None:
        listed = real_hub.call("GET", "jobs", tokens["alice"]).json()["jobs"][0]
        row = row_of(s.get(f"{real_hub.url}{BASE}", timeout=60).text, a)
        again = real_hub.call("GET", "jobs", tokens["alice"]).json()["jobs"][0]
        if listed != again or listed["state"] != "CANCELLED":
            return None
        hours = f'<td class="num">{listed["gpuSeconds"] / 3600:.3f}</td>'
        took = f'<td class="num">{duration(listed["finished"] - listed["submitted"])}</td>'
        return row if hours + "<td></td></tr>" in row and took + hours in row else None

    row = real_hub.until(settled, "the list shows the cancelled job's final usage", 60)
    assert "data-state='CANCELLED'" in row and "cancelled by alice" in row and "<form" not in row
    html = s.get(f"{real_hub.url}{BASE}jobs/{a}", timeout=60).text
    assert "data-state='CANCELLED'" in html and "<form" not in html
