"""A queue as a bar and words (aviflow.views.queue_bar): checked on the samples the TypeScript
mirror is checked on (extensions/labextension/test/queue_bar_samples.json), then as
aviflow-api's pages render it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from aviflow.records import PendingJob, QueueQuota
from aviflow.views.queue_bar import WaitingRow, queue_bar, waiting_rows
from aviflow_hub.service.page_html import queue_bar as page_queue_bar

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = json.loads(
    (ROOT / "extensions/labextension/test/queue_bar_samples.json").read_text(encoding="utf-8")
)["samples"]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["name"])
def test_the_bar_of_each_sample(sample: dict[str, Any]) -> None:
    record = QueueQuota.from_dict(sample["queue"])
    assert queue_bar(record).to_dict() == sample["bar"]
    # the record's wire form is the sample's: what the sidebar reads is what was rendered here
    assert record.to_dict() == sample["queue"]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["name"])
def test_the_page_renders_the_same_bar(sample: dict[str, Any]) -> None:
    html = page_queue_bar(QueueQuota.from_dict(sample["queue"]))
    bar = sample["bar"]
    label = bar["label"].replace("<", "&lt;")
    assert f"<span>{label}</span>" in html
    for cls, key in (
        ("used", "inQuotaPct"),
        ("borrowed", "borrowedPct"),
        ("pending", "pendingPct"),
    ):
        assert f'<span class="{cls}" style="width:{bar[key]:g}%"></span>' in html
    if bar["quotaPct"] is None:
        assert 'class="quota"' not in html
    else:
        assert f'<span class="quota" style="left:{bar["quotaPct"]:g}%"></span>' in html


def test_the_waiting_rows_first_in_line_first_and_how_many_more() -> None:
    pending = tuple(PendingJob(f"w-{i}", "bob", i, 2 - i) for i in range(1, 4))
    q = QueueQuota("q", 8, pending_count=3, pending=pending)
    assert waiting_rows(q, 2) == (
        [WaitingRow(1, "bob", "w-1", 1), WaitingRow(2, "bob", "w-2", 0)],
        1,
    )
    assert waiting_rows(q, 10)[1] == 0
    assert waiting_rows(q, 10)[0][2] == WaitingRow(3, "bob", "w-3", 0)  # -1 GPUs counts as 0
