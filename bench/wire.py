"""What the one codec (``aviflow.wire``) costs against the hand-written ``to_dict`` /
``from_dict`` it replaced, as ratios measured in one run.

The baseline is the records' hand-written code as it was before the codec (copied below,
for the records the busiest paths use: a job listing's rows, a status file, an event log,
a queue listing). Each record is encoded and decoded many times by both; the ratio is the
codec's time over the hand-written one's. Target: at most 1.5 each.

    .venv/bin/python bench/wire.py [--number 5000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable, Mapping
from typing import Any

from aviflow.estimate import Estimate, WaitNumbers
from aviflow.records import (
    Event,
    EventType,
    FailureInfo,
    JobState,
    JobStatus,
    JobSummary,
    PendingJob,
    QueueQuota,
)

# -- the hand-written baseline (aviflow/records.py before aviflow.wire) --


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def failure_to(f: FailureInfo) -> dict[str, Any]:
    out: dict[str, Any] = {
        "rank": f.rank,
        "node": f.node,
        "attempt": f.attempt,
        "exception": f.exception,
        "message": f.message,
        "traceback": f.traceback,
        "exitCode": f.exit_code,
        "logTail": f.log_tail,
        "time": f.time,
        "pid": f.pid,
    }
    return {k: v for k, v in out.items() if v is not None and v != ""}


def failure_from(d: Mapping[str, Any]) -> FailureInfo:
    return FailureInfo(
        rank=_opt_int(d.get("rank")),
        node=_opt_int(d.get("node")),
        attempt=int(d.get("attempt") or 0),
        exception=str(d.get("exception") or ""),
        message=str(d.get("message") or ""),
        traceback=str(d.get("traceback") or ""),
        exit_code=_opt_int(d.get("exitCode", d.get("exit_code"))),
        log_tail=str(d.get("logTail") or d.get("log_tail") or ""),
        time=_opt_float(d.get("time")),
        pid=_opt_int(d.get("pid")),
    )


def event_to(e: Event) -> dict[str, Any]:
    out: dict[str, Any] = {"type": e.type.value, "attempt": e.attempt, "time": e.time}
    if e.message:
        out["message"] = e.message
    if e.data:
        out["data"] = e.data
    return out


def event_from(d: Mapping[str, Any]) -> Event:
    return Event(
        type=EventType(d["type"]),
        attempt=int(d.get("attempt") or 0),
        message=str(d.get("message") or ""),
        time=float(d["time"]),
        data=dict(d.get("data") or {}),
    )


def wait_to(w: WaitNumbers) -> dict[str, Any]:
    return {
        "queue": w.queue,
        "quota": w.quota,
        "holds": w.holds,
        "borrowed": w.borrowed,
        "lendable": w.lendable,
        "ahead": w.ahead,
        "aheadGpus": w.ahead_gpus,
    }


def status_to(s: JobStatus) -> dict[str, Any]:
    out: dict[str, Any] = {"state": s.state.value, "attempt": s.attempt}
    if s.message:
        out["message"] = s.message
    if s.updated is not None:
        out["updated"] = s.updated
    if s.queue_position is not None:
        out["queuePosition"] = s.queue_position
    if s.wait is not None:
        out["wait"] = wait_to(s.wait)
    if s.failure is not None:
        out["failure"] = failure_to(s.failure)
    return out


def status_from(d: Mapping[str, Any]) -> JobStatus:
    failure = d.get("failure")
    return JobStatus(
        state=JobState(d.get("state") or JobState.QUEUED),
        attempt=int(d.get("attempt") or 0),
        message=str(d.get("message") or ""),
        updated=_opt_float(d.get("updated")),
        queue_position=_opt_int(d.get("queuePosition")),
        failure=failure_from(failure) if isinstance(failure, Mapping) else None,
        expected_start=Estimate.from_dict(d.get("expectedStart")),
        wait=WaitNumbers.from_dict(d.get("wait")),
    )


def summary_to(s: JobSummary) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": s.id,
        "name": s.name,
        "user": s.user,
        "team": s.team,
        "queue": s.queue,
        "nodes": s.nodes,
        "gpusPerNode": s.gpus_per_node,
        "gpus": s.gpus,
        "state": s.state.value,
        "attempt": s.attempt,
        "message": s.message,
        "queuePosition": s.queue_position,
        "submitted": s.submitted,
        "updated": s.updated,
        "finished": s.finished,
        "gpuSeconds": s.gpu_seconds,
        "origin": s.origin,
    }
    if s.failure is not None:
        out["failure"] = failure_to(s.failure)
    return out


def summary_from(d: Mapping[str, Any]) -> JobSummary:
    failure = d.get("failure")
    return JobSummary(
        id=str(d["id"]),
        name=str(d.get("name") or ""),
        user=str(d.get("user") or ""),
        team=d.get("team"),
        queue=str(d.get("queue") or ""),
        nodes=int(d["nodes"]),
        gpus_per_node=int(d["gpusPerNode"]),
        state=JobState(d["state"]),
        attempt=int(d.get("attempt") or 0),
        message=str(d.get("message") or ""),
        queue_position=_opt_int(d.get("queuePosition")),
        submitted=float(d.get("submitted") or 0.0),
        updated=_opt_float(d.get("updated")),
        finished=_opt_float(d.get("finished")),
        gpu_seconds=float(d.get("gpuSeconds") or 0.0),
        failure=failure_from(failure) if isinstance(failure, Mapping) else None,
        origin=dict(d.get("origin") or {}),
        expected_start=Estimate.from_dict(d.get("expectedStart")),
        wait=WaitNumbers.from_dict(d.get("wait")),
    )


def quota_to(q: QueueQuota) -> dict[str, Any]:
    return {
        "queue": q.queue,
        "team": q.team,
        "gpuQuota": q.gpu_quota,
        "gpusInUse": q.gpus_in_use,
        "pendingCount": q.pending_count,
        "borrowed": q.borrowed,
        "pending": [
            {"id": p.id, "user": p.user, "position": p.position, "gpus": p.gpus} for p in q.pending
        ],
    }


def quota_from(d: Mapping[str, Any]) -> QueueQuota:
    return QueueQuota(
        queue=str(d["queue"]),
        gpu_quota=_opt_int(d.get("gpuQuota")),
        gpus_in_use=int(d.get("gpusInUse") or 0),
        pending_count=int(d.get("pendingCount") or 0),
        team=d.get("team"),
        borrowed=int(d.get("borrowed") or 0),
        pending=tuple(
            PendingJob(str(p["id"]), str(p.get("user") or ""), int(p["position"]), int(p["gpus"]))
            for p in d.get("pending") or ()
        ),
    )


FAILURE = FailureInfo(3, 1, 2, "ValueError", "bad batch", "Traceback ...", 1, "", 12.5, 4242)
CASES: list[tuple[str, Any, Callable[[Any], Any], Callable[[Any], Any]]] = [
    ("FailureInfo", FAILURE, failure_to, failure_from),
    ("Event", Event(EventType.RUNNING, 1, "running", 5.0), event_to, event_from),
    (
        "JobStatus",
        JobStatus(
            JobState.QUEUED, 0, "waiting", 1.0, 3, None, None, WaitNumbers("q", 8, 8, 0, 0, 2, 8)
        ),
        status_to,
        status_from,
    ),
    (
        "JobSummary",
        JobSummary(
            "j-1", "tiny", "alice", "vision", "vision", 2, 8, JobState.FAILED, failure=FAILURE
        ),
        summary_to,
        summary_from,
    ),
    (
        "QueueQuota",
        QueueQuota("vision", 8, 4, 2, "vision", 0, (PendingJob("a", "alice", 1, 4),) * 2),
        quota_to,
        quota_from,
    ),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    number, repeat = args.number, args.repeat
    print(f"{'record':<12} {'encode µs':>10} {'ratio':>6} {'decode µs':>10} {'ratio':>6}")
    worst = 0.0
    for name, record, hand_to, hand_from in CASES:
        wire = record.to_dict()
        assert hand_to(record) == wire and hand_from(wire) == type(record).from_dict(wire)
        calls = [
            (hand_to, record),
            (type(record).to_dict, record),
            (hand_from, wire),
            (type(record).from_dict, wire),
        ]
        best = [float("inf")] * 4
        for _ in range(repeat):  # interleaved, so a busy moment of the machine hits both
            for i, (fn, arg) in enumerate(calls):
                took = timeit.timeit(lambda f=fn, a=arg: f(a), number=number)
                best[i] = min(best[i], took)
        times = [b / number * 1e6 for b in best]
        enc, dec = times[1] / times[0], times[3] / times[2]
        worst = max(worst, enc, dec)
        print(f"{name:<12} {times[1]:>10.2f} {enc:>6.2f} {times[3]:>10.2f} {dec:>6.2f}")
    print(f"worst ratio {worst:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
