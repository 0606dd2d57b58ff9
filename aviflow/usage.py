"""What a running job uses of what it holds: the ranks' samples, the driver's ``USAGE`` events
and the idle flag. Pure decisions plus :func:`watch`, which a driver (the local supervisor,
the Kubernetes controller) calls on each pass, as it calls :func:`aviflow.driving.watch_hang`.

Every rank samples its own use every few seconds (:mod:`aviflow.runtime._sampler`) into
``heartbeats/attempt-<a>-rank-<r>.usage.json`` in the job's data part: on a GPU its device's
utilization, memory and power (NVML); without one, its process's CPU utilization of the cores
it was given and its RSS. Those files are the job's, so hostile: :func:`parse_sample` keeps
only typed, bounded numbers. Every ``interval`` seconds of a running attempt the driver folds
the fresh samples into one ``USAGE`` event (the mean over ranks, and each rank's), so the
event log -- platform-written -- is the one source of the panel's and job page's use figures,
the ledger's used GPU-hours and the idle decision.

*Utilization*: a GPU's is NVML's "percent of time a kernel ran" (``kind`` ``"gpu"``). A CPU
rank's is its CPU time over wall time x the cores it was given (``kind`` ``"cpu"``): on a pool
without GPUs the "used" hours derive from that, and are labelled CPU, never GPU.

*Idle*: an attempt whose mean utilization stayed under ``below`` percent in every ``USAGE``
event for ``after`` seconds (counted from its start or the last busy sample) is flagged once
with an ``IDLE`` event; with ``action == "cancel"`` the driver then cancels the job.

>>> policy = IdlePolicy(below=5.0, after=60.0)
>>> u = lambda t, util: Event(EventType.USAGE, 1, time=t, data={"kind": "cpu", "util": util})
>>> is_idle([u(10.0, 1.0), u(40.0, 2.0)], running_since=0.0, now=61.0, policy=policy)
True
>>> is_idle([u(10.0, 1.0), u(40.0, 50.0)], running_since=0.0, now=61.0, policy=policy)
False
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from aviflow._model import StrictModel
from aviflow.records import Event, EventType
from aviflow.store import RunDir
from aviflow.store._files import read_bytes

KINDS = ("gpu", "cpu")
MAX_BYTES = 1 << 50  # memory figures above a PiB are not believed
MAX_WATTS = 10_000.0
MAX_RANKS_IN_EVENT = 64  # per-rank figures kept in one USAGE event (the mean covers all)
MAX_SAMPLE_BYTES = 4096  # a rank's sample is a few hundred bytes; a bigger file is refused
FRESH_SECONDS = 10.0  # a sample older than this (or than 3 intervals) is not current use
IdleAction = Literal["flag", "cancel"]


class IdlePolicy(StrictModel):
    """The admin's idle rule: under ``below`` percent for ``after`` seconds; then ``action``."""

    below: float = Field(
        alias="belowPercent",
        gt=0,
        le=100,
        description="A job whose mean GPU utilization (CPU on pools without GPUs) stays under "
        "this percent ...",
    )
    after: float = Field(
        alias="afterSeconds", gt=0, description="... for this many seconds is flagged idle."
    )
    action: IdleAction = Field(
        "flag",
        description="flag: an IDLE event in the job's log, shown in its panel and the usage "
        "report; cancel: that, then the job is cancelled.",
    )


class UsageSettings(StrictModel):
    """How often a driver records use (``interval`` seconds; a rank's sample counts while it
    is younger than 3 x that, and at least :data:`FRESH_SECONDS`), and the idle rule (None:
    no idle check)."""

    interval: float = Field(
        60.0,
        alias="intervalSeconds",
        gt=0,
        le=3600,
        description="Seconds between two USAGE events of a running job (its mean GPU or CPU "
        "utilization, memory and power, from what its ranks sample every 2 s).",
    )
    idle: IdlePolicy | None = Field(
        None, description="The idle rule (null: jobs are never flagged idle)."
    )

    @classmethod
    def from_value(cls, value: UsageSettings | Mapping[str, Any] | None) -> UsageSettings:
        """``value`` as settings (a config section's dict is validated here)."""
        if value is None:
            return cls()
        if isinstance(value, UsageSettings):
            return value
        return cls.model_validate(value)


def usage_argv(settings: UsageSettings) -> list[str]:
    """``settings`` as the local supervisor's arguments (its ``usage_arguments`` parse them)."""
    out = ["--usage-interval", repr(float(settings.interval))]
    if settings.idle is not None:
        idle = settings.idle
        out += ["--idle-below", repr(float(idle.below)), "--idle-after", repr(float(idle.after))]
        out += ["--idle-action", idle.action]
    return out


@dataclass(frozen=True)
class Sample:
    """One rank's latest use, as read back (validated) from what it wrote."""

    rank: int
    time: float
    kind: str
    util: float  # percent, 0..100
    mem: int | None = None  # bytes in use (GPU memory, or the process's RSS)
    mem_total: int | None = None  # bytes the device (or the node) has
    power: float | None = None  # watts (GPUs only)


def _real(value: object, lo: float, hi: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) and lo <= v <= hi else None


def _count(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_BYTES else None


def parse_sample(obj: object, rank: int) -> Sample | None:
    """A rank's sample from the JSON it wrote, or None when it is not one (wrong types,
    utilization outside 0..100, a time that is not finite): figures that are out of range
    are dropped, never clamped into looking real."""
    if not isinstance(obj, Mapping):
        return None
    when = _real(obj.get("time"), 0.0, 1e12)
    util = _real(obj.get("util"), 0.0, 100.0)
    kind = obj.get("kind")
    if when is None or util is None or kind not in KINDS:
        return None
    return Sample(
        rank=rank,
        time=when,
        kind=str(kind),
        util=util,
        mem=_count(obj.get("mem")),
        mem_total=_count(obj.get("mem_total")),
        power=_real(obj.get("power"), 0.0, MAX_WATTS),
    )


def read_samples(run: RunDir, attempt: int, world: int) -> list[Sample]:
    """The ranks' latest samples of ``attempt`` (ranks without a readable one left out)."""
    out = []
    for rank in range(world):
        try:  # beneath the job's directory, no symlink followed, at most MAX_SAMPLE_BYTES
            raw = read_bytes(run.usage_path(attempt, rank), run.path, MAX_SAMPLE_BYTES)
            found = parse_sample(json.loads(raw), rank)
        except (OSError, ValueError, RecursionError):  # missing, refused or not JSON
            continue
        if found is not None:
            out.append(found)
    return out


def usage_event(samples: Sequence[Sample], attempt: int, now: float, since: float) -> Event | None:
    """The ``USAGE`` event for ``samples`` (fresh ones, taken after ``since``), or None when
    there are none. One kind per event: GPU samples where any rank has a GPU."""
    fresh = [s for s in samples if since <= s.time <= now + 5.0]
    kind = "gpu" if any(s.kind == "gpu" for s in fresh) else "cpu"
    fresh = [s for s in fresh if s.kind == kind]
    if not fresh:
        return None
    data: dict[str, Any] = {
        "kind": kind,
        "util": round(sum(s.util for s in fresh) / len(fresh), 2),
        "ranks": len(fresh),
    }
    mems = [s.mem for s in fresh if s.mem is not None]
    totals = [s.mem_total for s in fresh if s.mem_total is not None]
    powers = [s.power for s in fresh if s.power is not None]
    if mems:
        data["mem"] = max(mems)  # the fullest rank: what runs out first
    if totals:
        data["memTotal"] = max(totals)
    if powers:
        data["power"] = round(sum(powers), 1)
    data["perRank"] = [
        {"rank": s.rank, "util": round(s.util, 1), **({"mem": s.mem} if s.mem is not None else {})}
        for s in fresh[:MAX_RANKS_IN_EVENT]
    ]
    return Event(EventType.USAGE, attempt, "", now, data)


def event_util(event: Event) -> float | None:
    """The mean utilization a ``USAGE`` event carries (validated: events come from the
    driver, but a ledger reads what any writer of the log wrote)."""
    return _real(event.data.get("util"), 0.0, 100.0)


def event_kind(event: Event) -> str | None:
    kind = event.data.get("kind")
    return kind if kind in KINDS else None


def is_idle(events: Sequence[Event], running_since: float, now: float, policy: IdlePolicy) -> bool:
    """Whether the attempt whose ``USAGE`` events are ``events`` (and that runs since
    ``running_since``) has stayed under ``policy.below`` for ``policy.after`` seconds: at
    least one sample in the window, none busy, and the window is ``after`` long."""
    since = running_since
    measured = False
    for ev in events:
        util = event_util(ev) if ev.type is EventType.USAGE else None
        if util is None or ev.time < running_since:
            continue
        if util >= policy.below:
            since, measured = ev.time, False
        else:
            measured = True
    return measured and now - since >= policy.after


def idle_event(attempt: int, now: float, policy: IdlePolicy, kind: str) -> Event:
    what = "GPU" if kind == "gpu" else "CPU"
    verb = "cancelling it" if policy.action == "cancel" else "flagged"
    message = f"idle: {what} utilization under {policy.below:g}% for {policy.after:g} s; {verb}"
    data = {"kind": kind, "below": policy.below, "after": policy.after, "action": policy.action}
    return Event(EventType.IDLE, attempt, message, now, data)


@dataclass(frozen=True)
class Watched:
    """What one pass of :func:`watch` found: events to record, and whether to cancel."""

    events: tuple[Event, ...] = ()
    cancel: str | None = None  # the cancel message, when the idle rule says stop


def watch(
    run: RunDir,
    events: Sequence[Event],
    attempt: int,
    running_since: float,
    world: int,
    settings: UsageSettings,
    now: float | None = None,
) -> Watched:
    """One pass of a driver's use check for a running ``attempt`` whose log is ``events``:
    a ``USAGE`` event once ``settings.interval`` has passed since the last one (or the
    attempt's start), then an ``IDLE`` event if the idle rule holds (once per attempt). Once
    the rule flagged the attempt to be cancelled, every later pass returns that cancel again
    (the controller rebuilds its lifecycle from the status each pass and would forget it)."""
    now = time.time() if now is None else now
    cancel = idle_cancel(events, attempt)
    if cancel is not None:  # asked again each pass: a driver may keep no memory of the ask
        return Watched(cancel=cancel)
    mine = [
        e for e in events if e.attempt == attempt and e.type in (EventType.USAGE, EventType.IDLE)
    ]
    last = max((e.time for e in mine if e.type is EventType.USAGE), default=running_since)
    if now - last < settings.interval:
        return Watched()
    since = max(running_since, now - max(3 * settings.interval, FRESH_SECONDS))
    found = usage_event(read_samples(run, attempt, world), attempt, now, since)
    if found is None:
        return Watched()
    out = [found]
    policy = settings.idle
    flagged = any(e.type is EventType.IDLE for e in mine)
    if policy is not None and not flagged and is_idle([*mine, found], running_since, now, policy):
        kind = event_kind(found) or "cpu"
        out.append(idle_event(attempt, now, policy, kind))
        if policy.action == "cancel":
            return Watched(tuple(out), out[-1].message)
    return Watched(tuple(out))


def latest_usage(events: Sequence[Event], attempt: int) -> Event | None:
    """The attempt's latest ``USAGE`` event (what a view shows), if any."""
    return next(
        (e for e in reversed(events) if e.type is EventType.USAGE and e.attempt == attempt), None
    )


def flagged_idle(events: Sequence[Event], attempt: int) -> Event | None:
    """The attempt's ``IDLE`` event, if it was flagged."""
    return next(
        (e for e in reversed(events) if e.type is EventType.IDLE and e.attempt == attempt), None
    )


def idle_cancel(events: Sequence[Event], attempt: int) -> str | None:
    """The cancel message of the attempt's ``IDLE`` event when the rule's action was to
    cancel (written by the driver, never by the job), else None."""
    flag = flagged_idle(events, attempt)
    return flag.message if flag is not None and flag.data.get("action") == "cancel" else None
