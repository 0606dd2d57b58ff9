"""HTML and script planted in every field a job or a user writes are inert wherever Aviflow
renders them: aviflow-api's pages (job list, job page, usage report, error page), the notebook
panel (its widgets' HTML and the ``%aviflow_jobs`` table) and the JupyterLab job view, which
shows the same server-rendered sections (:func:`aviflow.views.sections.sections_html`).

Every field gets its own payload, ``<script>alert('<field>')</script><img src=x
onerror=alert('<field>')>``; each rendering is parsed as a browser would (:class:`Parsed`) and
must hold only the elements and attributes its renderer writes itself (no ``script``, no
``img``, no event handler) while its text shows each field's payload literally, which proves
the field was rendered, and escaped. Fields typed as numbers get strings too: a checkpoint
marker, a metrics row or a failure record is written by the job, whatever its declared type.

The JupyterLab side (sidebar rows, job view) is checked by jest on what this module renders:
``extensions/labextension/test/hostile_job.json`` is the server extension's answer for the
hostile job (regenerate it after an intended change with ``AVIFLOW_UPDATE_GOLDEN=1 pytest
tests/hub/test_rendering_hostile.py``).
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import ipywidgets as w

from aviflow.errors import AviflowError, JobNotFound
from aviflow.records import (
    CheckpointRef,
    FailureInfo,
    JobState,
    JobSummary,
    PendingJob,
    QueueQuota,
)
from aviflow.views.sections import MAX_CHARTS, sections_html, snapshot_dict
from aviflow.views.snapshot import JobSnapshot, RankState
from aviflow_hub.ledger.html import render_report
from aviflow_hub.service.page_html import error_page_html, home_html, job_page_html
from aviflow_magics._table import JobsTable, job_row
from aviflow_magics.widgets._sync import descendants
from aviflow_magics.widgets.panel import JobPanel

BASE = "/services/aviflow-api/"
FIXTURE = Path(__file__).resolve().parents[2] / "extensions/labextension/test/hostile_job.json"

# What the renderers write themselves; anything else in a rendering was planted.
ELEMENTS = frozenset(
    ("html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "nav", "a", "p",
     "section", "div", "span", "b", "code", "pre", "br", "table", "thead", "tbody", "tr", "th",
     "td", "form", "input", "button", "svg", "text", "rect", "polyline")
)  # fmt: skip
ATTRIBUTES = frozenset(
    ("charset", "id", "class", "style", "href", "method", "action", "type", "name", "value",
     "role", "xmlns", "width", "height", "viewbox", "x", "y", "font-size", "font-family", "fill",
     "stroke", "stroke-width", "points", "text-anchor")
)  # fmt: skip


def hostile(field: str) -> str:
    return f"<script>alert('{field}')</script><img src=x onerror=alert('{field}')>"


class Parsed(HTMLParser):
    """One rendering as a browser parses it: its elements with their attributes, and its text
    (character references resolved)."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.chunks: list[str] = []
        self.feed(html)
        self.close()
        self.text = "".join(self.chunks)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)


def around(html: str, needle: str) -> str:
    at = html.lower().find(needle.lower())
    return html[max(0, at - 300) : at + 300] if at >= 0 else html[:600]


def assert_inert(html: str, fields: list[str]) -> Parsed:
    """``html`` holds no planted element or attribute, and shows each field's payload as text."""
    for tag in ("<script", "<img"):
        assert tag not in html.lower(), around(html, tag)
    parsed = Parsed(html)
    tags = {tag for tag, _ in parsed.elements}
    assert tags <= ELEMENTS, f"planted elements {tags - ELEMENTS}"
    for tag, attrs in parsed.elements:
        planted = {a for a in attrs if a not in ATTRIBUTES and not a.startswith("data-")}
        assert not planted, f"planted attributes {planted} on <{tag}>"
        assert not (attrs.get("href") or "").lower().startswith("javascript"), attrs
    missing = [f for f in fields if hostile(f) not in parsed.text]
    assert not missing, f"fields not shown (as text): {missing} in {html[:600]}..."
    return parsed


# -- the hostile job ------------------------------------------------------------------------------

SNAPSHOT_FIELDS = [
    "job id",
    "job name",
    "message",
    "attempt",
    "gpus per node",
    "gpu hours",
    "rank",
    "rank state",
    "failure rank",
    "failure node",
    "failure exception",
    "failure message",
    "failure traceback",
    "metric key",
    "metric key 9",
    "checkpoint step",
    "checkpoint attempt",
    "checkpoint time",
]
QUEUED_FIELDS = ["queue position", "queued message", "failure log tail"]


def snapshot(state: JobState = JobState.FAILED) -> JobSnapshot:
    """A job whose every job- or user-written field (and each number a job writes) is hostile;
    ``QUEUED``: with a queue position and a failure that has only a log tail."""
    h: Any = hostile
    failure = FailureInfo(
        rank=h("failure rank"),
        node=h("failure node"),
        exception=h("failure exception"),
        message=h("failure message"),
        traceback=h("failure traceback"),
    )
    metrics: dict[str, list[tuple[int, float]]] = {
        h("metric key"): [(h("metric step"), 1.0), (1, 0.5), (2, 0.25)]
    }
    metrics.update({f"m{i}": [(1, float(i))] for i in range(MAX_CHARTS - 1)})
    metrics[h("metric key 9")] = [(1, 1.0)]  # past MAX_CHARTS: named under the charts
    snap = JobSnapshot(
        id=h("job id"),
        name=h("job name"),
        state=state,
        attempt=h("attempt"),
        message=h("message"),
        queue_position=None,
        nodes=1,
        gpus_per_node=h("gpus per node"),
        submitted=1000.0,
        finished=1060.0,
        now=1060.0,
        gpu_hours=h("gpu hours"),
        ranks=(RankState(rank=h("rank"), node=0, state=h("rank state")),),
        failure=failure,
        metrics=metrics,
        checkpoints=(
            CheckpointRef(
                "j-1",
                step=h("checkpoint step"),
                attempt=h("checkpoint attempt"),
                time=h("checkpoint time"),
            ),
        ),
        log_ranks=(0,),
    )
    if state is JobState.QUEUED:
        queued = FailureInfo(log_tail=h("failure log tail"))
        snap = replace(
            snap, queue_position=h("queue position"), message=h("queued message"), failure=queued
        )
    return snap


def summary(state: JobState = JobState.FAILED, prefix: str = "") -> JobSummary:
    h: Any = lambda field: hostile(prefix + field)  # noqa: E731
    return JobSummary(
        id=h("job id"),
        name=h("job name"),
        user=h("user"),
        team=h("team"),
        queue=h("queue"),
        nodes=1,
        gpus_per_node=h("gpus per node"),
        state=state,
        message=h("message"),
        queue_position=h("queue position") if state is JobState.QUEUED else None,
        submitted=1000.0,
        gpu_seconds=3600.0,
        failure=FailureInfo(
            rank=h("failure rank"), exception=h("failure exception"), message=h("failure message")
        ),
        origin={"notebook": h("origin notebook"), "execution_count": h("origin cell")},
    )


QUOTA = QueueQuota(
    hostile("quota queue"),
    gpu_quota=4,
    gpus_in_use=1,
    pending_count=1,
    team=hostile("quota team"),
    pending=(PendingJob(hostile("pending id"), hostile("pending user"), position=1, gpus=1),),
)


# -- the sections every view shares --------------------------------------------------------------


def test_every_section_of_a_hostile_job_is_inert() -> None:
    html = "".join(sections_html(snapshot()).values())
    parsed = assert_inert(html, SNAPSHOT_FIELDS)
    assert hostile("metric step") not in parsed.text  # a point whose step is no number: left out
    chart = next(a for t, a in parsed.elements if t == "svg" and a.get("data-metric"))
    assert (chart["data-metric"], chart["data-points"]) == (hostile("metric key"), "2")
    step = next(a for t, a in parsed.elements if t == "tr" and "data-step" in a)
    assert step["data-step"] == hostile("checkpoint step")
    queued = "".join(sections_html(snapshot(JobState.QUEUED)).values())
    assert_inert(queued, QUEUED_FIELDS)
    assert "position " + hostile("queue position") + " in the queue: " in Parsed(queued).text


def test_the_escaped_checkpoint_attempt_is_exact() -> None:
    """The issue's case: a marker's ``attempt`` is put into the page as text."""
    html = sections_html(snapshot())["checkpoints"]
    assert (
        "<td>&lt;script&gt;alert(&#x27;checkpoint attempt&#x27;)&lt;/script&gt;"
        "&lt;img src=x onerror=alert(&#x27;checkpoint attempt&#x27;)&gt;</td>"
    ) in html


# -- aviflow-api's pages --------------------------------------------------------------------------

SUMMARY_FIELDS = ["job id", "job name", "user", "team", "queue", "gpus per node"]


def test_aviflow_apis_pages_are_inert() -> None:
    jobs = [summary(JobState.FAILED, "failed "), summary(JobState.QUEUED, "queued ")]
    home = home_html(
        viewer=hostile("viewer"),
        scope=hostile("scope"),
        quotas=[QUOTA],
        jobs=jobs,
        base=BASE,
        xsrf=hostile("xsrf"),
        now=2000.0,
    )
    fields = [f"failed {f}" for f in [*SUMMARY_FIELDS, "failure exception", "failure message"]]
    fields += [f"queued {f}" for f in [*SUMMARY_FIELDS, "message", "queue position"]]
    fields += ["viewer", "scope", "quota queue", "quota team", "pending id", "pending user"]
    parsed = assert_inert(home, fields)
    assert {a["value"] for t, a in parsed.elements if a.get("name") == "_xsrf"} == {hostile("xsrf")}

    logs = [(0, hostile("log line")), (1, "")]
    page = job_page_html(snapshot(), summary(), logs, 9, base=BASE, xsrf="t")
    assert_inert(page, [*SNAPSHOT_FIELDS, "log line", "user", "team", "queue"])
    assert Parsed(page).chunks[0] == hostile("job name") + " · Aviflow job"  # the <title>

    error = error_page_html(404, hostile("error class"), hostile("error message"), BASE)
    assert_inert(error, ["error class", "error message"])

    rows = [
        {"key": hostile("report key"), "gpu_hours": 1.0, "attempts": 1, "jobs": 1,
         "restarts": 0, "preemptions": 0},
        {"key": "x", "gpu_hours": 2.0, "attempts": hostile("attempts"),
         "jobs": hostile("jobs"), "restarts": hostile("restarts"),
         "preemptions": hostile("preemptions")},
    ]  # fmt: skip
    report = render_report(
        {"team": rows[:1], "user": rows[1:]},
        viewer=hostile("report viewer"),
        scope=hostile("report scope"),
        generated="now",
        csv_base=BASE + "api/v1/usage",
    )
    report_fields = ["report key", "attempts", "jobs", "restarts", "preemptions"]
    assert_inert(report, [*report_fields, "report viewer", "report scope"])


# -- the notebook panel ---------------------------------------------------------------------------


class HostileJob:
    """What the panel calls on a Job, answering with hostile text."""

    id = "j-1"

    def cancel(self) -> bool:
        raise AviflowError(hostile("cancel error"))

    def logs(self, rank: int | None = None, tail: int = 40) -> str:
        return hostile("log line")

    def checkpoint_path(self, ref: CheckpointRef | None = None) -> Path:
        raise JobNotFound(hostile("checkpoint problem") + "\nimport os")


def panel_html(panel: JobPanel) -> str:
    return "".join(x.value for x in descendants(panel) if isinstance(x, w.HTML))


def test_the_notebook_panel_is_inert() -> None:
    panel = JobPanel(HostileJob(), start=False)  # type: ignore[arg-type]
    try:
        panel.apply(snapshot())
        panel.show_error(hostile("panel error"))
        panel.cancel.do_cancel()
        assert panel.cancel._thread is not None
        panel.cancel._thread.join(30)
        fields = [*SNAPSHOT_FIELDS, "log line", "panel error", "cancel error"]
        assert_inert(panel_html(panel), fields)
        panel.apply(snapshot(JobState.QUEUED))
        assert_inert(panel_html(panel), QUEUED_FIELDS)

        # the load snippet (Python the user may run): job-written text stays in comments
        cp = panel.checkpoints
        cp.choice.value = hostile("checkpoint step")
        cp.show_snippet()
        assert cp.snippet.value == (
            f"# checkpoint step {hostile('checkpoint step')} of job j-1\n"
            f"# {hostile('checkpoint problem')}\n# import os\n"
        )
    finally:
        panel.close()


def test_the_jobs_table_is_inert() -> None:
    table = JobsTable(rows=[job_row(summary(), now=2000.0)])._repr_html_()
    assert_inert(table, ["job id", "job name", "origin notebook", "origin cell"])


# -- what the JupyterLab extension's jest tests render ---------------------------------------------


def labextension_fixture() -> str:
    """The server extension's answers for the hostile job (as ``aviflow_jupyter.reads``
    builds them) and the payload of each field, for extensions/labextension/test."""
    snap = snapshot()
    data = {
        "detail": {"job": snapshot_dict(snap), "html": sections_html(snap)},
        "detailFields": SNAPSHOT_FIELDS,
        "queue": QUOTA.to_dict(),
        "payload": hostile("FIELD"),
    }
    return json.dumps(data, indent=1, ensure_ascii=False) + "\n"


def test_the_labextension_fixture_is_current() -> None:
    text = labextension_fixture()
    if os.environ.get("AVIFLOW_UPDATE_GOLDEN") == "1":
        FIXTURE.write_text(text)
    assert FIXTURE.read_text() == text, f"rerun with AVIFLOW_UPDATE_GOLDEN=1 ({FIXTURE})"
