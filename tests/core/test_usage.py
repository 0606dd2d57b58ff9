"""What a running job uses (aviflow.usage, aviflow.throughput, the rank's sampler): the pure
decisions on exact inputs, and two local jobs -- one that trains (its tokens/s, step time and
CPU use reach the run store and the views) and one that sleeps holding its slot (flagged
idle, then stopped as the admin's rule says)."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

import aviflow
from aviflow import tracking
from aviflow.attempts import attempts_from_events, job_info
from aviflow.backends._supervisor import usage_arguments, usage_settings
from aviflow.backends.local import LocalBackend
from aviflow.errors import BackendError
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import Event, EventType, JobState
from aviflow.runtime._sampler import (
    cgroup_cores,
    cores_per_rank,
    cpu_util,
    device_index,
    nvml_reader,
)
from aviflow.store import RunDir, atomic_write
from aviflow.throughput import Rates, mfu, peak_flops
from aviflow.usage import (
    MAX_SAMPLE_BYTES,
    IdlePolicy,
    Sample,
    UsageSettings,
    Watched,
    is_idle,
    parse_sample,
    read_samples,
    usage_argv,
    usage_event,
    watch,
)
from aviflow.views.sections import header_html, ranks_html, snapshot_dict
from aviflow.views.snapshot import RankState, take_snapshot
from aviflow.views.use import rank_use, use_html


def _use(t: float, util: float, attempt: int = 1) -> Event:
    return Event(EventType.USAGE, attempt, time=t, data={"kind": "gpu", "util": util})


# -- throughput ------------------------------------------------------------------------------
def test_rates_from_a_tokens_counter() -> None:
    rates = Rates()
    assert rates.update(10, 100.0, 4096) == {}
    assert rates.update(10, 100.5, 4096) == {}  # the same step again (an eval row)
    assert rates.update(12, 102.0, 12288) == {"tokens_per_s": 4096.0, "step_time": 1.0}
    assert rates.update(5, 103.0, 2048) == {}  # a restarted attempt re-logs from step 5
    assert rates.update(6, 103.25, 3072) == {"tokens_per_s": 4096.0, "step_time": 0.25}


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H200", 989e12),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA L40S", 362e12),
        ("NVIDIA L4", 121e12),
        ("Intel Xeon", None),
        ("", None),
        (None, None),
    ],
)
def test_peak_flops_by_device_name(name: str | None, peak: float | None) -> None:
    assert peak_flops(name) == peak


def test_mfu() -> None:
    # a 7B model (6 x 7e9 + attention ~ 4.4e10 FLOPs/token) at 3,000 tokens/s per H100 on 8
    assert mfu(24_000.0, 4.4e10, 989e12, 8) == 0.133468
    assert mfu(24_000.0, 4.4e10, 0.0, 8) is None  # no peak (a CPU): no MFU
    assert mfu(24_000.0, 0, 989e12, 8) is None


def test_log_adds_the_rates_and_keeps_the_jobs_own_keys(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("AVIFLOW_RUN_DIR", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tracking, "_RATES", tracking._Throughput())
    aviflow.log({"loss": 2.0, "tokens": 1000}, step=1)
    aviflow.log({"loss": 1.5, "tokens": 3000, "step_time": 0.7}, step=2)
    rows = tracking.run_dir().metrics()
    first, second = rows.items
    assert first.values == {"loss": 2.0, "tokens": 1000}
    span = second.time - first.time
    assert second.values == {
        "loss": 1.5,
        "tokens": 3000,
        "step_time": 0.7,  # the job's own
        "tokens_per_s": round(2000 / span, 3),
    }


# -- samples and USAGE events ----------------------------------------------------------------
@pytest.mark.parametrize(
    "obj",
    [
        None,
        [],
        "x",
        {"time": 1.0, "kind": "gpu"},
        {"time": 1.0, "kind": "tpu", "util": 5},
        {"time": 1.0, "kind": "gpu", "util": 101},
        {"time": 1.0, "kind": "gpu", "util": -1},
        {"time": 1.0, "kind": "gpu", "util": True},
        {"time": float("nan"), "kind": "gpu", "util": 5},
        {"time": "1", "kind": "gpu", "util": 5},
    ],
)
def test_a_sample_that_is_not_one_is_dropped(obj: object) -> None:
    assert parse_sample(obj, 0) is None


def test_a_samples_out_of_range_figures_are_dropped() -> None:
    obj = {"time": 5.0, "kind": "gpu", "util": 40, "mem": -1, "mem_total": 2**60, "power": 1e9}
    assert parse_sample(obj, 3) == Sample(3, 5.0, "gpu", 40.0, None, None, None)


def test_a_usage_event_is_the_mean_over_the_fresh_samples_of_one_kind() -> None:
    samples = [
        Sample(0, 100.0, "gpu", 80.0, 40 << 30, 80 << 30, 500.0),
        Sample(1, 100.0, "gpu", 40.0, 60 << 30, 80 << 30, 300.0),
        Sample(2, 50.0, "gpu", 0.0),  # stale
        Sample(3, 100.0, "cpu", 100.0),  # a GPU job's CPU figure is not its use
    ]
    ev = usage_event(samples, 1, now=101.0, since=90.0)
    assert ev is not None
    assert (ev.type, ev.attempt, ev.time) == (EventType.USAGE, 1, 101.0)
    assert ev.data == {
        "kind": "gpu",
        "util": 60.0,
        "ranks": 2,
        "mem": 60 << 30,
        "memTotal": 80 << 30,
        "power": 800.0,
        "perRank": [
            {"rank": 0, "util": 80.0, "mem": 40 << 30},
            {"rank": 1, "util": 40.0, "mem": 60 << 30},
        ],
    }
    assert usage_event(samples[2:3], 1, now=101.0, since=90.0) is None


# -- idle ------------------------------------------------------------------------------------
POLICY = IdlePolicy(below=10.0, after=100.0)


@pytest.mark.parametrize(
    ("events", "now", "idle"),
    [
        ([], 500.0, False),  # never measured: no verdict
        ([_use(30.0, 2.0)], 99.0, False),  # under the rule's time since the start
        ([_use(30.0, 2.0)], 100.0, True),
        ([_use(30.0, 2.0), _use(60.0, 50.0), _use(90.0, 1.0)], 159.0, False),  # busy at 60
        ([_use(30.0, 2.0), _use(60.0, 50.0), _use(90.0, 1.0)], 160.0, True),
        ([_use(30.0, 2.0), _use(160.0, 10.0)], 200.0, False),  # at the threshold is busy
        ([_use(-5.0, 0.0)], 500.0, False),  # before this attempt ran
    ],
)
def test_the_idle_decision(events: list[Event], now: float, idle: bool) -> None:
    assert is_idle(events, running_since=0.0, now=now, policy=POLICY) is idle


def _sample(run: RunDir, rank: int, t: float, util: float) -> None:
    atomic_write(run.usage_path(1, rank), json.dumps({"time": t, "kind": "cpu", "util": util}))


def test_watch_records_use_every_interval_and_flags_an_idle_attempt_once(tmp_path) -> None:
    run = RunDir(tmp_path / "job")
    run.heartbeats_dir.mkdir(parents=True)
    settings = UsageSettings(interval=30.0, idle=IdlePolicy(below=5, after=60, action="cancel"))
    log: list[Event] = []
    for rank in (0, 1):
        _sample(run, rank, 29.0, 1.0)
    assert watch(run, log, 1, 0.0, 2, settings, now=29.0).events == ()  # not yet an interval
    found = watch(run, log, 1, 0.0, 2, settings, now=30.0)
    assert [(e.type, e.data["util"]) for e in found.events] == [(EventType.USAGE, 1.0)]
    assert found.cancel is None
    log += found.events
    for rank in (0, 1):
        _sample(run, rank, 59.0, 3.0)
    found = watch(run, log, 1, 0.0, 2, settings, now=60.0)
    assert [e.type for e in found.events] == [EventType.USAGE, EventType.IDLE]
    assert found.events[1].message == "idle: CPU utilization under 5% for 60 s; cancelling it"
    assert found.events[1].data == {"kind": "cpu", "below": 5.0, "after": 60.0, "action": "cancel"}
    assert found.cancel == found.events[1].message
    log += found.events
    # every later pass asks for the cancel again, records nothing more
    assert watch(run, log, 1, 0.0, 2, settings, now=61.0) == Watched((), found.events[1].message)
    assert watch(run, log, 1, 0.0, 2, settings, now=150.0).cancel == found.events[1].message
    assert watch(run, log, 2, 0.0, 2, settings, now=150.0).cancel is None  # next attempt


def test_flag_only_flags(tmp_path) -> None:
    run = RunDir(tmp_path / "job")
    run.heartbeats_dir.mkdir(parents=True)
    _sample(run, 0, 59.0, 0.0)
    settings = UsageSettings(interval=30.0, idle=IdlePolicy(below=5, after=60))
    found = watch(run, [_use(30.0, 0.0)], 1, 0.0, 1, settings, now=60.0)
    assert [e.type for e in found.events] == [EventType.USAGE, EventType.IDLE]
    assert found.events[1].message == "idle: CPU utilization under 5% for 60 s; flagged"
    assert found.cancel is None
    log = [_use(30.0, 0.0), *found.events]
    assert watch(run, log, 1, 0.0, 1, settings, now=150.0) == Watched()  # a stale sample: no use


def test_a_sample_file_that_is_not_one_is_skipped(tmp_path) -> None:
    run = RunDir(tmp_path / "job")
    run.heartbeats_dir.mkdir(parents=True)
    _sample(run, 0, 10.0, 40.0)
    run.usage_path(1, 1).write_text("{" + " " * MAX_SAMPLE_BYTES + "}")  # too big to read
    (tmp_path / "elsewhere.json").write_text(json.dumps({"time": 10.0, "kind": "cpu", "util": 1}))
    run.usage_path(1, 2).symlink_to(tmp_path / "elsewhere.json")  # never followed
    run.usage_path(1, 3).write_text("[" * 3000)  # nested past the JSON reader's depth
    assert read_samples(run, 1, 5) == [Sample(0, 10.0, "cpu", 40.0)]


def test_the_samplers_arithmetic() -> None:
    assert cpu_util(10.0, 13.0, wall=2.0, cores=2) == 75.0
    assert cpu_util(10.0, 30.0, wall=2.0, cores=2) == 100.0
    assert cores_per_rank({"LOCAL_WORLD_SIZE": "4"}, usable=16) == 4
    assert cores_per_rank({"LOCAL_WORLD_SIZE": "4"}, usable=2) == 1
    assert device_index({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "4,6"}) == 6
    assert device_index({"LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "GPU-ab,GPU-cd"}) == 1
    assert device_index({}) == 0
    assert [cgroup_cores(t) for t in ("200000 100000", "150000 100000", "max 100000", "")] == [
        2,
        2,
        None,
        None,
    ]


class FakeNvml:
    """NVML as ``nvidia-ml-py`` shows it, for two GPUs: no GPU here, so the reader's
    arithmetic is checked against this stand-in (the real package: test_nvml.py)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def nvmlInit(self) -> None:
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUtilizationRates(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=[10, 93][h])

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(used=[1, 70 << 30][h], total=141 << 30)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return [60_000, 612_345][h]  # milliwatts


def test_the_nvml_reader(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml())
    read = nvml_reader(1)
    assert read is not None
    sample = {**read(), "time": 1.0}
    assert sample == {
        "kind": "gpu",
        "util": 93.0,
        "mem": 70 << 30,
        "mem_total": 141 << 30,
        "power": 612.345,
        "time": 1.0,
    }
    assert parse_sample(sample, 1) == Sample(1, 1.0, "gpu", 93.0, 70 << 30, 141 << 30, 612.345)
    assert nvml_reader(2) is None  # no such device: the CPU is sampled
    monkeypatch.setitem(sys.modules, "pynvml", FakeNvml(fail=True))
    assert nvml_reader(0) is None  # no driver


# -- local jobs ------------------------------------------------------------------------------
TRAINS = """
import time, aviflow
for step in range(1, 9):
    end = time.process_time() + 0.4
    while time.process_time() < end:  # CPU-bound, as training is
        pass
    aviflow.log({"loss": 1.0 / step, "tokens": 512 * step}, step=step)
"""


def _events(job, kind: EventType) -> list[Event]:
    return [e for e in job.events() if e.type is kind]


def test_a_training_jobs_throughput_and_cpu_use_reach_the_run_store_and_the_views(run_root):
    backend = LocalBackend(root=run_root, capacity=2, usage=UsageSettings(interval=0.5))
    job = aviflow.submit(
        {"metadata": {"name": "busy"}, "spec": {"script": TRAINS}}, backend=backend
    )
    assert job.wait(timeout=180) == JobState.SUCCEEDED
    rows = backend.run_dir(job.id).metrics().items
    assert [r.step for r in rows] == list(range(1, 9))
    for before, row in itertools.pairwise(rows):
        span = row.time - before.time
        assert row.values["tokens_per_s"] == round(512 / span, 3)
        assert row.values["step_time"] == round(span, 6)
    used = _events(job, EventType.USAGE)
    assert used, "no USAGE event while it trained"
    assert {(e.data["kind"], e.data["ranks"]) for e in used} == {("cpu", 1)}
    assert max(e.data["util"] for e in used) > 0
    assert all(0 < e.data["mem"] <= e.data["memTotal"] for e in used)
    assert _events(job, EventType.IDLE) == []  # no idle rule set
    snap = take_snapshot(job)
    assert snap.usage == used[-1].data
    header = header_html(snap)
    assert f"{rows[-1].values['tokens_per_s']:,.0f} tokens/s" in header
    assert f"CPU {used[-1].data['util']:.0f}%" in header
    assert snapshot_dict(snap)["usage"] == used[-1].data
    running = replace(snap, state=JobState.RUNNING, ranks=(RankState(0, 0, "RUNNING"),))
    util = used[-1].data["perRank"][0]["util"]
    assert f"<span class='aviflow-rank-use'>{util:.0f}%</span>" in ranks_html(running)
    # the ledger's fold of the same log: used = allocated x the mean CPU utilization
    info = job_info(job.meta, job.spec)
    [attempt] = attempts_from_events(info, job.events())
    util = attempt.mean_util()
    assert attempt.use_kind == "cpu" and util is not None and 0 < util <= 100
    assert attempt.used_seconds(now=0) == attempt.gpu_seconds(now=0) * util / 100
    assert (snap.used_hours, snap.used_kind) == (attempt.used_seconds(now=0) / 3600, "cpu")
    assert f"(used {snap.used_hours:.4f}, by CPU use)" in header


def test_the_use_line_trusts_no_figure() -> None:
    evil = "<script>alert(1)</script>"
    metrics = {"tokens_per_s": [(1, float("nan"))], "step_time": [(1, 0.25)], "mfu": [(1, 0.4)]}
    usage = {"kind": evil, "util": 250.0, "mem": evil}
    assert use_html(metrics, usage, None) == (
        "<div class='aviflow-use'>0.25 s/step &nbsp;·&nbsp; MFU 40.0%</div>"
    )
    usage = {"kind": "gpu", "util": 87.4, "mem": 40 * 2**30, "memTotal": 80 * 2**30, "power": 512}
    line = use_html({}, usage, evil)
    assert line == (
        "<div class='aviflow-use'>GPU 87% &nbsp;·&nbsp; GPU mem 40.0/80 GiB &nbsp;·&nbsp; 512 W"
        " &nbsp;·&nbsp; <span class='aviflow-idle' style='color:#b45309'>"
        "&lt;script&gt;alert(1)&lt;/script&gt;</span></div>"
    )
    assert use_html({}, None, None) == ""
    per_rank = [{"rank": 0, "util": 55.5}, {"rank": True, "util": 1}, {"rank": 2, "util": "x"}, 7]
    assert rank_use({"perRank": per_rank}) == {0: "56%"}
    assert rank_use({"perRank": evil}) == {}


IDLES = "import time\ntime.sleep(300)\n"


def test_a_job_that_sleeps_holding_its_slot_is_flagged_idle_and_stopped(run_root):
    rule = IdlePolicy(below=20.0, after=1.0, action="cancel")
    backend = LocalBackend(root=run_root, capacity=2, usage={"interval": 0.5, "idle": rule})
    job = aviflow.submit(
        {"metadata": {"name": "sleeper"}, "spec": {"script": IDLES}}, backend=backend
    )
    assert job.wait(timeout=180) == JobState.CANCELLED
    [flag] = _events(job, EventType.IDLE)
    assert flag.message == "idle: CPU utilization under 20% for 1 s; cancelling it"
    assert job.events()[-1].message == flag.message  # the CANCELLED event says why
    snap = take_snapshot(job)
    assert snap.idle == flag.message
    assert "idle: CPU utilization under 20%" in header_html(snap)


def test_the_local_backend_passes_the_rule_to_its_supervisor() -> None:
    settings = UsageSettings(interval=2.5, idle=IdlePolicy(below=7.5, after=600, action="cancel"))
    parser = argparse.ArgumentParser()
    usage_arguments(parser)
    assert usage_settings(parser.parse_args(usage_argv(settings))) == settings
    assert usage_settings(parser.parse_args(usage_argv(UsageSettings()))) == UsageSettings()


def test_the_admins_rule_is_validated_where_it_is_configured(tmp_path: Path) -> None:
    section = {"intervalSeconds": 30, "idle": {"belowPercent": 10, "afterSeconds": 1800}}
    rule = IdlePolicy(below=10, after=1800, action="flag")
    assert ClusterSettings.from_dict({"usage": section}).usage == UsageSettings(
        interval=30, idle=rule
    )
    bad = {"idle": {"belowPercent": 150, "afterSeconds": 60, "action": "stop"}}
    with pytest.raises(BackendError) as caught:
        ClusterSettings.from_dict({"usage": bad})
    assert str(caught.value) == (
        "bad kubernetes settings: usage.idle.belowPercent: Input should be less than or equal "
        "to 100 (got 150); usage.idle.action: must be 'flag' or 'cancel', got 'stop'"
    )
    backend = LocalBackend(root=tmp_path, capacity=1, usage={"interval": 5, "idle": rule})
    assert backend.usage == UsageSettings(interval=5, idle=rule)
    with pytest.raises(BackendError, match=r"^usage: interval: Input should be greater than 0"):
        LocalBackend(root=tmp_path, capacity=1, usage={"interval": -1})
