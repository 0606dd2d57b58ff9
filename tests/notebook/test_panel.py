"""The job panel, asserted through the comm messages a frontend would receive.

Jobs are written into a real run store (``make_job``) and read through a real
``LocalBackend``; every widget comm is a ``RecordingComm`` (see conftest).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import ipywidgets as w

from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import FailureInfo, JobState, JobStatus
from aviflow.views.sections import MAX_POINTS, downsample
from aviflow_magics._job import NotebookJob
from aviflow_magics._poller import Poller
from aviflow_magics.widgets.cancel import CancelButton
from aviflow_magics.widgets.panel import JobPanel


def synced(widget: w.Widget, key: str) -> Any:
    """The value of ``key`` as the frontend knows it: the open state, then every update."""
    value = None
    for m in widget.comm.messages:
        data = m["data"] or {}
        if (m["msg_type"] == "comm_open" and key in data.get("state", {})) or (
            data.get("method") == "update" and key in data.get("state", {})
        ):
            value = data["state"][key]
    return value


def all_comms(panel: w.Widget) -> list[Any]:
    from aviflow_magics.widgets._sync import descendants

    return [d.comm for d in descendants(panel)]


def clear(panel: w.Widget) -> None:
    for c in all_comms(panel):
        c.messages.clear()


def test_queued_job_shows_its_queue_position(comms, make_job, local_backend) -> None:
    job = make_job(JobState.QUEUED, queue_position=2)
    panel = JobPanel(job, start=False)
    panel.poller.poll_once()
    header = synced(panel.header, "value")
    assert "data-state='QUEUED'" in header
    assert "position 2 in the queue: waiting for GPU slots" in header
    assert f"<code class='aviflow-id'>{job.id}</code>" in header
    assert synced(panel.failure.layout, "display") == "none"
    assert synced(panel.ranks, "value").count("data-state='QUEUED'") == 4
    assert "no metrics logged yet" in synced(panel.chart, "value")
    # its expected start and the numbers behind its wait (the status the supervisor writes),
    # in the words of `aviflow status` and aviflow-api's pages (aviflow.views.waiting)
    now = time.time()
    local_backend.store.get(job.id).write_status(
        JobStatus(
            JobState.QUEUED, 0, "waiting for GPU slots", now, 2,
            expected_start=Estimate(job.id, now + 300, now + 720),
            wait=WaitNumbers("local", 4, 4, 0, 0, 1, 2),
        )
    )  # fmt: skip
    panel.poller.poll_once()
    assert (
        "<div class='aviflow-start'>starts in about 5-12 min</div><div class='aviflow-wait'>"
        "queue local: quota 4 GPUs, holds 4 (0 borrowed), 0 idle in the cohort to borrow; "
        "1 job ahead (2 GPUs)</div>"
    ) in synced(panel.header, "value")


def test_running_job_updates_are_batched_one_message_per_widget(comms, make_job) -> None:
    job = make_job(JobState.RUNNING, metrics=20, checkpoints=(10,))
    panel = JobPanel(job, start=False)
    clear(panel)
    panel.poller.poll_once()
    per_comm = [len(c.updates()) for c in all_comms(panel)]
    assert max(per_comm) == 1  # hold_sync: every changed widget sends exactly one update
    assert sum(per_comm) >= 5
    assert "data-state='RUNNING'" in synced(panel.header, "value")
    chart = synced(panel.chart, "value")
    assert re.findall(r"data-metric='(\w+)' data-points='(\d+)'", chart) == [
        ("loss", "20"),
        ("lr", "20"),
    ]
    assert "<polyline" in chart
    assert list(synced(panel.checkpoints.choice, "_options_labels")) == ["step 10"]
    # nothing changed: a second snapshot only refreshes the elapsed time in the header
    clear(panel)
    panel.poller.poll_once()
    changed = [c for c in all_comms(panel) if c.updates()]
    assert {id(c) for c in changed} <= {id(panel.header.comm)}


def test_thousands_of_points_never_flood_the_comm(comms, make_job) -> None:
    job = make_job(JobState.RUNNING, metrics=5000)
    panel = JobPanel(job, start=False)
    clear(panel)
    panel.poller.poll_once()
    sent = sum(len(json.dumps(m["data"])) for c in all_comms(panel) for m in c.messages)
    assert sent < 64_000
    points = [int(n) for n in re.findall(r"data-points='(\d+)'", synced(panel.chart, "value"))]
    assert len(points) == 2 and all(MAX_POINTS // 2 < p <= MAX_POINTS for p in points)


def test_downsample_keeps_ends_and_extremes() -> None:
    series = [(s, float(s % 97)) for s in range(1, 10_001)]
    series[5000] = (5001, 1000.0)  # a spike
    out = downsample(series, 300)
    assert len(out) <= 300
    assert out[0] == series[0] and out[-1] == series[-1]
    assert (5001, 1000.0) in out
    assert [s for s, _ in out] == sorted(s for s, _ in out)
    assert downsample(series[:10], 300) == series[:10]


def test_failure_shows_first_failing_rank_and_traceback_at_the_top(comms, make_job) -> None:
    failure = FailureInfo(
        rank=3,
        node=1,
        exception="RuntimeError",
        message="boom at step 7",
        traceback='Traceback (most recent call last):\n  File "train.py", line 9\nRuntimeError: boom at step 7\n',
    )
    job = make_job(JobState.FAILED, failure=failure, metrics=7)
    panel = JobPanel(job, start=False)
    panel.poller.poll_once()
    assert panel.children[0] is panel.failure
    assert synced(panel.failure.layout, "display") is None
    box = synced(panel.failure, "value")
    assert "First failure: rank 3 on node 1</b> &mdash; RuntimeError: boom at step 7" in box
    assert "File &quot;train.py&quot;, line 9" in box
    ranks = synced(panel.ranks, "value")
    assert re.findall(
        r"data-rank='(\d)'>rank \d <span class='aviflow-rank-state' data-state='(\w+)'", ranks
    ) == [("0", "STOPPED"), ("1", "STOPPED"), ("2", "STOPPED"), ("3", "FAILED")]
    assert synced(panel.cancel.button, "disabled") is True


def test_log_viewer_follows_the_rank_selected_in_the_frontend(comms, make_job) -> None:
    job = make_job(JobState.RUNNING, log_lines=100)
    panel = JobPanel(job, start=False)
    panel.poller.poll_once()
    viewer = panel.logs
    assert list(synced(viewer.rank, "_options_labels")) == [
        "all ranks",
        "rank 0",
        "rank 1",
        "rank 2",
        "rank 3",
    ]
    assert "[rank 3] rank 3 line 99" in synced(viewer.text, "value")
    # the frontend picks "rank 2" and a tail of 5, as a browser would
    viewer.rank._handle_msg(
        {
            "content": {"data": {"method": "update", "state": {"index": 3}, "buffer_paths": []}},
            "buffers": [],
        }
    )
    viewer.tail._handle_msg(
        {
            "content": {"data": {"method": "update", "state": {"value": 5}, "buffer_paths": []}},
            "buffers": [],
        }
    )
    shown = synced(viewer.text, "value")
    assert re.findall(r"rank 2 line (\d+)", shown) == ["95", "96", "97", "98", "99"]
    assert "rank 3" not in shown


def test_checkpoint_list_and_load_snippet(comms, make_job) -> None:
    job = make_job(JobState.SUCCEEDED, checkpoints=(10, 20))
    panel = JobPanel(job, start=False)
    panel.poller.poll_once()
    cp = panel.checkpoints
    assert re.findall(r"data-step='(\d+)'", synced(cp.table, "value")) == ["10", "20"]
    assert list(synced(cp.choice, "_options_labels")) == ["step 10", "step 20"]
    assert synced(cp.snippet.layout, "display") == "none"
    cp.load.click()
    path = str(job.checkpoint_path())
    assert path.endswith("/checkpoints/step-000000020")
    assert synced(cp.snippet, "value").startswith(f"# checkpoint step 20 of job {job.id}\n")
    assert synced(cp.snippet, "value").endswith(f"accelerator.load_state({path!r})\n")
    assert synced(cp.snippet.layout, "display") is None


def test_cancel_asks_for_confirmation(comms) -> None:
    calls: list[str] = []
    button = CancelButton(lambda: calls.append("cancel") or True)
    button.button.click()
    assert synced(button.confirm.layout, "display") is None
    assert synced(button.note, "value") == "Cancel this job? Every rank is stopped."
    button.keep.click()
    assert synced(button.confirm.layout, "display") == "none"
    assert calls == []
    button.button.click()
    button.confirm.click()
    button._thread.join(30)
    assert calls == ["cancel"]
    assert synced(button.note, "value") == "cancelled"
    assert synced(button.button, "disabled") is True


def test_poller_is_throttled_and_stops_when_the_job_ends(comms, make_job) -> None:
    running = make_job(JobState.RUNNING, metrics=3)
    seen: list[Any] = []
    poller = Poller(running, seen.append, interval=0.01, max_updates_per_second=5)
    assert poller.period == 0.2
    started = time.monotonic()
    poller.start()
    time.sleep(1.0)
    poller.stop()
    elapsed = time.monotonic() - started
    assert 1 <= len(seen) <= int(elapsed * 5) + 1
    assert not poller.running

    done = make_job(JobState.SUCCEEDED, metrics=3)
    finished: list[Any] = []
    poller = Poller(done, finished.append, interval=0.01)
    poller.start()
    poller.join(30)
    assert not poller.running
    assert [s.state for s in finished] == [JobState.SUCCEEDED]


def test_attach_replays_a_finished_job(comms, shell, make_job) -> None:
    old = make_job(JobState.SUCCEEDED, metrics=50, checkpoints=(25, 50))
    handle = shell.run_line_magic("aviflow_attach", f"{old.id} --out again")
    assert isinstance(handle, NotebookJob) and shell.user_ns["again"] is handle
    bundle = handle._repr_mimebundle_()
    panel = handle.panel()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == panel.model_id
    assert bundle["text/plain"] == f"<aviflow.Job {old.id} SUCCEEDED>"
    panel.poller.join(30)
    assert panel.last is not None and panel.last.state is JobState.SUCCEEDED
    chart = synced(panel.chart, "value")
    assert re.findall(r"data-metric='(\w+)' data-points='(\d+)'", chart) == [
        ("loss", "50"),
        ("lr", "50"),
    ]
    assert "data-state='SUCCEEDED'" in synced(panel.header, "value")


def test_series_buffer_stays_bounded_and_keeps_ends_and_spikes() -> None:
    from aviflow.views.snapshot import SeriesBuffer

    buf = SeriesBuffer(300)
    for step in range(1, 200_001):
        buf.add(step, 1000.0 if step == 123_457 else float(step % 97))
    points = buf.points()
    assert len(buf) == 200_000 and len(points) <= 302
    assert points[0] == (1, 1.0) and points[-1] == (200_000, float(200_000 % 97))
    assert (123_457, 1000.0) in points
    assert [s for s, _ in points] == sorted({s for s, _ in points})
    small = SeriesBuffer(300)
    for step in range(1, 11):
        small.add(step, float(step))
    assert small.points() == [(s, float(s)) for s in range(1, 11)]  # exact while small


def test_a_restarted_attempt_relogging_steps_replaces_them() -> None:
    from aviflow.views.snapshot import SeriesBuffer

    buf = SeriesBuffer(300)
    for step in range(1, 51):
        buf.add(step, 1.0)
    for step in range(31, 41):  # attempt 2 resumed from the checkpoint at step 30
        buf.add(step, 2.0)
    assert buf.points() == [(s, 1.0) for s in range(1, 31)] + [(s, 2.0) for s in range(31, 41)]


def test_each_refresh_reads_only_what_changed(comms, make_job, local_backend) -> None:
    from aviflow.records import MetricRow
    from aviflow.views.snapshot import SnapshotReader

    job = make_job(JobState.RUNNING, metrics=1000)
    calls: list[tuple[str, int]] = []
    real_events, real_metrics = local_backend.events, local_backend.metrics

    def events(job_id: str, since: int = 0, limit: int | None = None):
        calls.append(("events", since))
        return real_events(job_id, since, limit)

    def metrics(job_id: str, since: int = 0, after_step: int | None = None, limit=None):
        batch = real_metrics(job_id, since, after_step, limit)
        calls.append(("metrics", len(batch.items)))
        return batch

    local_backend.events, local_backend.metrics = events, metrics  # type: ignore[method-assign]
    reader = SnapshotReader(job)
    first = reader.read()
    assert first.metric_rows == 1000
    local_backend.run_dir(job.id).append_metric(MetricRow(1001, time.time(), 1, {"loss": 0.0}))
    second = reader.read()
    third = reader.read()
    assert second.metric_rows == third.metric_rows == 1001
    assert second.metrics["loss"][-1] == (1001, 0.0)
    events_at = [n for kind, n in calls if kind == "events"]
    assert events_at[0] == 0 and events_at[1] == events_at[2] > 0  # from the cursor on
    assert [n for kind, n in calls if kind == "metrics"] == [1000, 1, 0]


def test_a_long_history_is_read_a_few_pages_a_refresh_until_caught_up(
    comms, make_job, local_backend
) -> None:
    """A finished job that logged 60,000 rows: each refresh reads at most 5 pages of 10,000,
    says it is catching up (the chart notes it), and the panel reads on after the end."""
    from aviflow.views.snapshot import PAGES_PER_READ

    job = make_job(JobState.SUCCEEDED)
    run = local_backend.run_dir(job.id)
    run.metrics_path.write_text(
        "".join(
            json.dumps({"step": s, "time": float(s), "attempt": 1, "values": {"loss": 1 / s}})
            + "\n"
            for s in range(1, 60_001)
        )
    )
    pages: list[int] = []
    real_metrics = local_backend.metrics

    def metrics(job_id: str, since: int = 0, after_step: int | None = None, limit=None):
        batch = real_metrics(job_id, since, after_step, limit)
        pages.append(len(batch.items))
        return batch

    local_backend.metrics = metrics  # type: ignore[method-assign]
    seen: list[Any] = []
    poller = Poller(job, seen.append, interval=0.01, max_updates_per_second=100)
    poller.start()
    poller.join(30)
    assert not poller.running
    assert PAGES_PER_READ == 5 and pages == [10_000] * 6
    assert [(s.metric_rows, s.catching_up) for s in seen] == [(50_000, True), (60_000, False)]
    assert [s.state for s in seen] == [JobState.SUCCEEDED] * 2
    from aviflow.views.sections import sections_html, snapshot_dict

    charts = [sections_html(s)["charts"] for s in seen]
    assert "reading the logged metrics: 50000 rows so far, more to come" in charts[0]
    assert "reading the logged metrics" not in charts[1]
    assert (snapshot_dict(seen[0])["catchingUp"], snapshot_dict(seen[1])["catchingUp"]) == (
        True,
        False,
    )
    assert seen[1].metrics["loss"][-1] == (60_000, 1 / 60_000)
