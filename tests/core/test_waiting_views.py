"""A queued job's expected start and wait numbers, in the words every view shows
(aviflow.views.waiting): checked on the samples the TypeScript mirror is checked on
(extensions/labextension/test/waiting_samples.json), then on each Python surface: the
``kubectl`` column's window, ``aviflow ls`` and ``aviflow status``, the panel's header (also the
JupyterLab job view's and aviflow-api's job page's) and aviflow-api's job list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aviflow.cli import ls_rows, status_doc
from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import JobState, JobStatus, JobSummary
from aviflow.views.sections import header_html, snapshot_dict
from aviflow.views.snapshot import JobSnapshot
from aviflow.views.waiting import start_short, waiting_lines
from aviflow_hub.service.page_html import job_detail

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = json.loads(
    (ROOT / "extensions/labextension/test/waiting_samples.json").read_text(encoding="utf-8")
)
NOW = float(SAMPLES["now"])
BY_NAME = {s["name"]: s for s in SAMPLES["samples"]}


def parsed(sample: dict[str, Any]) -> tuple[Estimate | None, WaitNumbers | None]:
    return Estimate.from_dict(sample.get("expectedStart")), WaitNumbers.from_dict(
        sample.get("wait")
    )


@pytest.mark.parametrize("sample", SAMPLES["samples"], ids=lambda s: s["name"])
def test_the_words_of_each_sample(sample: dict[str, Any]) -> None:
    est, wait = parsed(sample)
    assert start_short(est, NOW) == sample["short"]
    assert waiting_lines(est, wait, sample["message"], NOW) == sample["lines"]
    assert (est.window() if est else None) == sample["window"]  # the kubectl column
    if est is not None:
        assert est.to_dict().get("window") == sample["window"]  # on the wire, the TrainJob's


def summary(name: str, state: JobState = JobState.QUEUED) -> JobSummary:
    est, wait = parsed(BY_NAME[name]) if name in BY_NAME else (None, None)
    return JobSummary(
        id=f"j-{name.replace(' ', '-')}",
        name=name.replace(" ", "-"),
        user="alice",
        team="team-a",
        queue="vision",
        nodes=1,
        gpus_per_node=4,
        state=state,
        message=BY_NAME[name]["message"] if name in BY_NAME else "",
        submitted=NOW - 60,
        expected_start=est,
        wait=wait,
    )


def test_ls_has_a_start_column_for_queued_jobs() -> None:
    listed = [summary(n) for n in ("range", "never", "now", "no estimate")]
    running = summary("range", JobState.RUNNING)  # an estimate left on it is not shown
    rows = ls_rows([running, *listed], NOW)  # newest first in, oldest first out
    assert rows[0] == ["ID", "NAME", "STATE", "NODES", "GPUS", "SUBMITTED", "START"]
    assert [(r[0], r[2], r[6]) for r in rows[1:]] == [
        ("j-no-estimate", "QUEUED", "-"),
        ("j-now", "QUEUED", "now"),
        ("j-never", "QUEUED", "never"),
        ("j-range", "QUEUED", "5-12 min"),
        ("j-range", "RUNNING", ""),
    ]
    assert rows[1][5] == "2025-12-03 22:45:40"


def test_status_adds_the_waiting_lines_to_a_queued_jobs_record() -> None:
    est, wait = parsed(BY_NAME["range"])
    message = BY_NAME["range"]["message"]
    record = JobStatus(JobState.QUEUED, 0, message, NOW, 3, expected_start=est, wait=wait)
    doc = status_doc("j-1", "tiny", record, 0.0, NOW)
    assert doc["waiting"] == BY_NAME["range"]["lines"]
    assert {k: v for k, v in doc.items() if k != "waiting"} == {
        "id": "j-1",
        "name": "tiny",
        **record.to_dict(),
        "gpuSeconds": 0.0,
    }
    assert "waiting" not in status_doc("j-1", "tiny", JobStatus(JobState.QUEUED), 0.0, NOW)
    running = JobStatus(JobState.RUNNING, 1, "running", NOW)
    assert "waiting" not in status_doc("j-1", "tiny", running, 0.0, NOW)


def snapshot(name: str) -> JobSnapshot:
    est, wait = parsed(BY_NAME[name]) if name in BY_NAME else (None, None)
    return JobSnapshot(
        id="j-1",
        name="tiny",
        state=JobState.QUEUED,
        attempt=0,
        message="waiting <for> quota",
        queue_position=2,
        nodes=1,
        gpus_per_node=4,
        submitted=NOW - 60,
        finished=None,
        now=NOW,
        gpu_hours=0.0,
        ranks=(),
        failure=None,
        expected_start=est,
        wait=wait,
    )


def test_the_panel_header_shows_the_start_and_the_numbers() -> None:
    queue = "<div class='aviflow-queue'>position 2 in the queue: waiting &lt;for&gt; quota</div>"
    assert queue + (
        "<div class='aviflow-start'>starts in about 5-12 min</div>"
        "<div class='aviflow-wait'>queue vision: quota 8 GPUs, holds 8 (0 borrowed), 4 idle in "
        "the cohort to borrow; 2 jobs ahead (12 GPUs)</div></div>"
    ) in header_html(snapshot("range"))
    never = header_html(snapshot("never"))
    assert (
        "<div class='aviflow-start'>never at this quota: needs 16 GPUs; queue &#x27;vision&#x27; "
        "may hold at most 8 (its quota, 8, and no cohort to borrow from)</div>"
    ) in never
    assert "<div class='aviflow-start'>starts now</div>" in header_html(snapshot("now"))
    assert header_html(snapshot("no estimate")).endswith(f"{queue}</div>")
    detail = snapshot_dict(snapshot("now"))  # the JupyterLab job view's record
    assert detail["expectedStart"] == BY_NAME["now"]["expectedStart"] | {"window": "now"}
    assert detail["wait"] == BY_NAME["now"]["wait"]


def test_the_job_list_row_shows_the_start_and_the_numbers() -> None:
    s = summary("range")
    s = JobSummary(**{**vars(s), "queue_position": 1})
    assert job_detail(s, NOW) == (
        '<div class="detail">position 1 in the queue: waiting for queue &#x27;vision&#x27; '
        "quota: needs 4 GPUs, 8/8 in use<div class='aviflow-start'>starts in about 5-12 min"
        "</div><div class='aviflow-wait'>queue vision: quota 8 GPUs, holds 8 (0 borrowed), "
        "4 idle in the cohort to borrow; 2 jobs ahead (12 GPUs)</div></div>"
    )
    assert job_detail(summary("never"), NOW).startswith(
        "<div class=\"detail\">queued<div class='aviflow-start'>never at this quota: needs 16"
    )
    assert job_detail(summary("now"), NOW).startswith(
        "<div class=\"detail\">queued: admitting<div class='aviflow-start'>starts now</div>"
    )
    assert job_detail(summary("no estimate"), NOW) == (
        '<div class="detail">queued: waiting for 1 GPU slot</div>'
    )


def test_a_summary_carries_the_estimate_over_the_wire() -> None:
    s = summary("range")
    wire = s.to_dict()
    assert wire["expectedStart"]["window"] == "12-03T22:52..22:59Z"
    assert wire["wait"] == BY_NAME["range"]["wait"]
    back = JobSummary.from_dict(wire)
    assert back.wait == s.wait
    assert back.expected_start == Estimate(
        "", 1764802300.0, 1764802720.0, assumed=("queue order as reported",)
    )
    assert "expectedStart" not in summary("no estimate").to_dict()
