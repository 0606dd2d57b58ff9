"""Events and metrics come in pages through the real API: rows and bytes per answer, ``next``
cursors and ``more``, followed by every client (HubBackend, ``Job``, the job page).

One hub for the module (``real_hub``: alice in team-a, bob in team-b). Each user has one
finished job, into whose ``data/metrics.jsonl`` the tests write rows straight, as a job's
tracker writes them (one compact JSON object a line): 25,000 short rows for alice; long and
hostile ones for bob (wide rows, text that JSON-escapes to three times its bytes, a row
heavier than a page).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from itertools import accumulate
from typing import Any

import pytest

from aviflow.backends.hub import HubBackend
from aviflow.job import Job
from aviflow.paging import MAX_PAGE_ROWS, PAGE_BYTES, PAGE_ROWS, wire_bytes
from aviflow.records import MetricRow
from aviflow.store import RunDir, RunStore

pytestmark = pytest.mark.timeout(600)
ROWS = 25_000
ENVELOPE = len('{"rows": [], "next": 9007199254740992, "more": false}')  # besides the rows


def line(step: int, values: dict[str, Any], ensure_ascii: bool = True) -> bytes:
    """A row of metrics.jsonl as aviflow's tracker appends it (``ensure_ascii=False``: as a
    job's own code may write it, text in UTF-8)."""
    row = {"step": step, "time": 1000.0 + step, "attempt": 1, "values": values}
    return json.dumps(row, separators=(",", ":"), ensure_ascii=ensure_ascii).encode() + b"\n"


@pytest.fixture(scope="module")
def jobs(real_hub: Any, tokens: dict[str, str]) -> dict[str, str]:
    """A finished job of alice's and one of bob's."""
    out = {}
    for user in ("alice", "bob"):
        spec = {"metadata": {"name": "paged"}, "spec": {"script": "print('hi')"}}
        r = real_hub.call("POST", "jobs", tokens[user], json={"spec": spec})
        assert r.status_code == 201, r.text
        out[user] = r.json()["id"]
    for user, job_id in out.items():

        def succeeded(user: str = user, job_id: str = job_id) -> bool:
            status = real_hub.call("GET", f"jobs/{job_id}/status", tokens[user]).json()
            return bool(status["state"] == "SUCCEEDED")

        real_hub.until(succeeded, f"{job_id} succeeds", timeout=300)
    return out


def run_dir(hub: Any, job_id: str) -> RunDir:
    return RunStore(hub.run_root).get(job_id)


@pytest.fixture(scope="module")
def many(real_hub: Any, jobs: dict[str, str]) -> Iterator[list[int]]:
    """alice's job with 25,000 rows; the offset after each line."""
    lines = [line(step, {"loss": 1.0 / step, "lr": 0.001}) for step in range(1, ROWS + 1)]
    run_dir(real_hub, jobs["alice"]).metrics_path.write_bytes(b"".join(lines))
    ends, at = [], 0
    for raw in lines:
        at += len(raw)
        ends.append(at)
    yield ends


def walk(hub: Any, token: str, path: str, query: str = "") -> list[dict[str, Any]]:
    """Every answer of ``path`` from cursor 0, following ``next`` while ``more``."""
    answers, since = [], 0
    while True:
        r = hub.call("GET", f"{path}?since={since}{query}", token)
        assert r.status_code == 200, r.text
        answers.append({"body": r.json(), "bytes": len(r.content)})
        if not r.json()["more"]:
            return answers
        assert r.json()["next"] > since
        since = r.json()["next"]


def test_the_first_answer_is_one_page_that_says_more_follow(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str], many: list[int]
) -> None:
    r = real_hub.call("GET", f"jobs/{jobs['alice']}/metrics", tokens["alice"])
    first = r.json()
    assert len(first["rows"]) == PAGE_ROWS == 1000
    assert [row["step"] for row in first["rows"]] == list(range(1, 1001))
    assert (first["next"], first["more"]) == (many[999], True)
    assert len(r.content) < PAGE_BYTES


def test_walking_the_pages_yields_every_row_once_in_order(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str], many: list[int]
) -> None:
    path = f"jobs/{jobs['alice']}/metrics"
    for limit, sizes in ((1000, [1000] * 25), (10_000, [10_000, 10_000, 5000])):
        bodies = [a["body"] for a in walk(real_hub, tokens["alice"], path, f"&limit={limit}")]
        assert [len(b["rows"]) for b in bodies] == sizes, limit
        assert [b["more"] for b in bodies] == [True] * (len(sizes) - 1) + [False]
        assert [b["next"] for b in bodies] == [many[n - 1] for n in accumulate(sizes)]
        steps = [row["step"] for b in bodies for row in b["rows"]]
        assert steps == list(range(1, ROWS + 1)) and len(set(steps)) == ROWS
    # past afterStep: a page counts only the rows it returns
    late = [a["body"] for a in walk(real_hub, tokens["alice"], path, "&limit=7&afterStep=24990")]
    assert [[row["step"] for row in b["rows"]] for b in late] == [
        list(range(24_991, 24_998)),
        [24_998, 24_999, 25_000],
    ]
    # nothing new after the last page
    done = real_hub.call("GET", f"{path}?since={many[-1]}", tokens["alice"]).json()
    assert done == {"rows": [], "next": many[-1], "more": False}


def test_every_client_reads_every_row(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str], many: list[int]
) -> None:
    hub = HubBackend(f"{real_hub.url}/services/aviflow-api/", token=tokens["alice"])
    job = Job(jobs["alice"], hub)
    rows = job.metric_rows()
    assert len(rows) == ROWS and [r["step"] for r in rows] == list(range(1, ROWS + 1))
    assert rows[-1] == {
        "step": ROWS,
        "time": 1000.0 + ROWS,
        "attempt": 1,
        "loss": 1 / ROWS,
        "lr": 0.001,
    }
    assert [r["step"] for r in job.metric_rows(after_step=24_000)] == list(range(24_001, 25_001))
    page = hub.metrics(jobs["alice"], limit=MAX_PAGE_ROWS)
    assert (len(page.items), page.next, page.more) == (10_000, many[9999], True)
    # events: one page a read with limit=1, all of them through the Job
    events = [e.type.value for e in job.events()]
    assert events[0] == "QUEUED" and events[-1] == "SUCCEEDED"
    pages, since, more = [], 0, True
    while more:
        page_ = hub.events(jobs["alice"], since, limit=1)
        pages.append([e.type.value for e in page_.items])
        since, more = page_.next, page_.more
    assert pages == [[t] for t in events]
    # the job's page charts every row, having read them all in one view (5 pages a read)
    html = real_hub.page(f"jobs/{jobs['alice']}", tokens["alice"]).text
    assert "data-metric='loss'" in html and "reading the logged metrics" not in html


def test_an_answer_stays_under_the_byte_cap_whatever_its_rows(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    wide = {f"k{i:02d}": "x" * 1000 for i in range(100)}  # ~101 kB a row as JSON
    escaped = {f"k{i:02d}": "é" * 1000 for i in range(100)}  # 2 bytes a char, 6 as JSON
    heavy = {f"k{i:03d}": "é" * 1000 for i in range(256)}  # heavier than a page: never sent
    raw = (
        [line(s, wide) for s in range(1, 21)]
        + [line(s, escaped, ensure_ascii=False) for s in range(21, 24)]
        + [line(24, heavy, ensure_ascii=False)]
    )
    run_dir(real_hub, jobs["bob"]).metrics_path.write_bytes(b"".join(raw))
    weight = wire_bytes(MetricRow(10, 1010.0, 1, wide))
    assert 10 * weight <= PAGE_BYTES < 11 * weight  # ten wide rows a page
    assert wire_bytes(MetricRow(21, 1021.0, 1, escaped)) > PAGE_BYTES // 2 > len(raw[20])
    answers = walk(real_hub, tokens["bob"], f"jobs/{jobs['bob']}/metrics", "&limit=10000")
    assert [len(a["body"]["rows"]) for a in answers] == [10, 10, 1, 1, 1]
    assert all(a["bytes"] <= PAGE_BYTES + ENVELOPE for a in answers), [a["bytes"] for a in answers]
    assert [row["step"] for a in answers for row in a["body"]["rows"]] == list(range(1, 24))
    assert answers[-1]["body"]["next"] == sum(map(len, raw))  # the heavy row is passed over


def test_a_page_limit_out_of_bounds_is_a_clear_400(
    real_hub: Any, tokens: dict[str, str], jobs: dict[str, str]
) -> None:
    for part in ("events", "metrics"):
        for raw in ("0", "10001", "-1", "x", "", "1.5"):
            r = real_hub.call("GET", f"jobs/{jobs['alice']}/{part}?limit={raw}", tokens["alice"])
            assert (r.status_code, r.json()["error"]) == (400, "RequestError"), (part, raw)
            assert r.json()["message"] == (
                f"limit must be a whole number from 1 to 10000, got {raw!r}"
            )
        for ok in ("1", "10000"):
            r = real_hub.call("GET", f"jobs/{jobs['alice']}/{part}?limit={ok}", tokens["alice"])
            assert r.status_code == 200 and r.json()["more"] in (True, False)
