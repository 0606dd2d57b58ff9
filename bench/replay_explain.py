"""Where a kept replay's expected-start errors come from (``bench/replay.py --keep`` keeps
its work directory; pure: reads its files, no cluster).

Each configuration's first estimates are recomputed with the controller's estimator
(:func:`aviflow.estimate.estimate`) from the pool snapshot each was made from
(``snapshots.json``), as made and with the windows replaced by what then happened
(``events.json``): each running job's true end (its attempt's next ending event), each
waiting job's true hold (its next attempt, admission to end), and both; then also knowing
the jobs submitted later (each at its submission, with its true hold: the estimator's
``arriving``, which the controller's forecast never has). With all of it known, what is
left comes from what the estimator does not model: preemption among borrowers, a reclaimed
borrower's return to its queue, and admission's own latency. Also counted: how many rated
jobs a job submitted after their estimate passed (started before them, in their queue or its
cohort). Errors are rated as the replay rates them (:func:`_replay_stats.estimate_errors`,
the expected start; waits under ``--floor`` seconds are not rated). A later job's GPUs come
from the kept ``jobs.json``, or, in a work directory kept before it was, from the
snapshots that list the job (one none lists is left out of the last column).

    .venv/bin/python bench/replay_explain.py /tmp/aviflow-bench-replay-XXXXXXXX [--requeue 1]

>>> events = {"a": [["QUEUED", 0.0], ["STARTING", 0.0], ["SUCCEEDED", 40.0]],
...           "b": [["QUEUED", 5.0], ["STARTING", 40.0], ["SUCCEEDED", 50.0]]}
>>> pool = {"time": 10.0, "reclaim": True, "queues": {"team-x": "x"},
...         "limits": [{"name": "x", "nominal": 8, "cohort": None, "borrowingLimit": None,
...                     "lendingLimit": None, "strict": False}],
...         "holding": [{"id": "a", "queue": "x", "gpus": 8, "release": [15.0, 25.0]}],
...         "waiting": [{"id": "b", "queue": "x", "gpus": 8, "runsFor": [5.0, 15.0]}]}
>>> snaps = {"b": {"team": "x", "first": 10.0, "pool": pool}}
>>> explain(snaps, events, floor=1.0)  # expected at 20 (the window's middle), started at 40
Explained(rated=1, as_made=0.666667, ends=0.0, holds=0.666667, both=0.0, later=0.0, passed=0)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from _replay_stats import Sample, estimate_errors, percentile

from aviflow.estimate import Holding, Waiting, estimate
from aviflow.k8s.forecast import KUEUE_REQUEUE, parse_snapshot
from aviflow.records import EventType

Events = Mapping[str, Sequence[Sequence[Any]]]  # job id -> [(type, time), ...]


class Explained(NamedTuple):
    """One configuration's rated first estimates: how many, their median error as made and
    knowing the running jobs' ends, the waiting jobs' holds, both, and also the later
    submissions; how many were passed by a later submission."""

    rated: int
    as_made: float
    ends: float
    holds: float
    both: float
    later: float
    passed: int


def _ends(events: Sequence[Sequence[Any]], after: float) -> float | None:
    """The first time at or after ``after`` an attempt ended."""
    return next((t for k, t in events if EventType(k).ends_attempt() and t >= after), None)


def _hold(events: Sequence[Sequence[Any]], after: float) -> float | None:
    """Seconds the job's next attempt admitted after ``after`` held its GPUs (a STARTING
    event has Kueue's whole seconds: up to a second before the admission)."""
    start = next((t for k, t in events if k == "STARTING" and t > after - 1.0), None)
    end = _ends(events, start) if start is not None else None
    return end - start if start is not None and end is not None else None


def _started(events: Sequence[Sequence[Any]]) -> float | None:
    return next((t for k, t in events if k == "STARTING"), None)


def _team(job_id: str) -> str:
    """The team of a replayed job's id (``r0042-<team>-<suffix>``: ``_replay_trace``'s names)."""
    parts = job_id.split("-")
    return parts[1] if len(parts) > 2 else ""


def _queues_and_known(pool: Mapping[str, Any]) -> tuple[dict[str, str], set[str]]:
    """A snapshot's ClusterQueue of each team, and the jobs it knew (holding or waiting)."""
    cq_of = {lq.removeprefix("team-"): cq for lq, cq in pool["queues"].items()}
    known = {h["id"] for h in pool["holding"]} | {w["id"] for w in pool["waiting"]}
    return cq_of, known


def _passed(job_id: str, seen: Mapping[str, Any], events: Events, start: float) -> bool:
    """Whether a job that was neither holding nor waiting in the snapshot (submitted after
    it) was admitted before ``job_id``, in its queue or its queue's cohort."""
    pool = seen["pool"]
    cq_of, known = _queues_and_known(pool)
    cohort = {q["name"]: q["cohort"] for q in pool["limits"]}
    mine = cq_of.get(seen["team"])

    def near(team: str) -> bool:
        cq = cq_of.get(team)
        return cq == mine or (cohort.get(mine) is not None and cohort.get(cq) == cohort[mine])

    return any(
        other not in known
        and other != job_id
        and near(_team(other))
        and (t := _started(evs)) is not None
        and pool["time"] < t < start
        for other, evs in events.items()
    )


def _submitted(events: Sequence[Sequence[Any]]) -> float | None:
    return next((t for k, t in events if k == "QUEUED"), None)


def gpus_seen(snapshots: Mapping[str, Any]) -> dict[str, int]:
    """Each job's GPUs as the kept snapshots list it (holding or waiting), for a work
    directory kept without ``jobs.json``."""
    found: dict[str, int] = {}
    for seen in snapshots.values():
        pool = seen.get("pool") or {}
        for j in [*pool.get("holding", ()), *pool.get("waiting", ())]:
            found.setdefault(j["id"], j["gpus"])
    return found


def _arriving(
    job_id: str, seen: Mapping[str, Any], events: Events, gpus: Mapping[str, int], start: float
) -> list[tuple[float, Waiting]]:
    """The jobs submitted after the snapshot and before ``job_id`` started, in the queues
    it lists, each with its true hold (those that never started are left out)."""
    pool = seen["pool"]
    cq_of, known = _queues_and_known(pool)
    found = []
    for other, evs in events.items():
        at, queue = _submitted(evs), cq_of.get(_team(other))
        if other in known or other == job_id or at is None or queue is None:
            continue
        if not pool["time"] < at < start or other not in gpus:
            continue
        if (held := _hold(evs, at)) is not None:
            found.append((at, Waiting(other, queue, gpus[other], (held, held))))
    return found


def explain(
    snapshots: Mapping[str, Any],
    events: Events,
    floor: float = 1.0,
    gpus: Mapping[str, int] | None = None,
    requeue: float = 0.0,
) -> Explained:
    """One configuration's kept files (``snapshots.json``, ``events.json``; ``gpus``: each
    job's, from ``jobs.json``, else as the snapshots list them) explained; ``requeue``: the
    admission's lag after a release, as the controller's forecast counted it
    (:data:`aviflow.k8s.forecast.KUEUE_REQUEUE`; 0 before it did)."""
    gpus = gpus_seen(snapshots) if gpus is None else gpus
    found: dict[str, list[Sample]] = {
        "as_made": [], "ends": [], "holds": [], "both": [], "later": []
    }  # fmt: skip
    passed = 0
    for job_id, seen in snapshots.items():
        start = _started(events.get(job_id, ()))
        if start is None or seen.get("pool") is None or start - seen["first"] < floor:
            continue
        now, limits, holding, waiting, _, reclaim = parse_snapshot(seen["pool"])
        if job_id not in {w.id for w in waiting}:
            continue  # the snapshot read was written after the job left the queue
        ends = [
            Holding(h.id, h.queue, h.gpus, (end, end))
            if (end := _ends(events.get(h.id, ()), now)) is not None
            else h
            for h in holding
        ]
        holds = [
            Waiting(w.id, w.queue, w.gpus, (held, held))
            if (held := _hold(events.get(w.id, ()), now)) is not None
            else w
            for w in waiting
        ]
        later = _arriving(job_id, seen, events, gpus, start)
        for name, (h, w, a) in {
            "as_made": (holding, waiting, []), "ends": (ends, waiting, []),
            "holds": (holding, holds, []), "both": (ends, holds, []),
            "later": (ends, holds, later),
        }.items():  # fmt: skip
            est = estimate(now, limits, h, w, reclaim=reclaim, arriving=a, requeue=requeue)
            est = est[job_id]
            if est.low is not None:
                found[name].append(Sample(seen["first"], est.low, est.high, start, est.expected))
        passed += _passed(job_id, seen, events, start)
    medians = {}
    for name, samples in found.items():
        errors, _, _ = estimate_errors(samples, floor, point="expected")
        medians[name] = round(percentile(errors, 0.5), 6)  # NaN where none was rated
    return Explained(len(found["as_made"]), **medians, passed=passed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kept", type=Path, help="bench/replay.py --keep's work directory")
    parser.add_argument("--floor", type=float, default=1.0, help="shortest wait rated (s)")
    parser.add_argument(
        "--requeue", type=float, default=KUEUE_REQUEUE,
        help="the admission's lag after a release, as the forecast counted it (s; 0 for a "
        "work directory kept before b75da4d)",
    )  # fmt: skip
    args = parser.parse_args()
    configs = sorted(p.parent for p in args.kept.glob("*/snapshots.json"))
    if not configs:
        print(f"{args.kept}: no */snapshots.json (run bench/replay.py --keep)", file=sys.stderr)
        return 2
    print(
        "| configuration | rated | as made | knowing the running jobs' ends | the waiting "
        "jobs' holds | both | and the later submissions | passed by a later submission |"
        "\n|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    for d in configs:
        snaps = json.loads((d / "snapshots.json").read_text())
        events = json.loads((d / "events.json").read_text())
        kept = d / "jobs.json"
        gpus = (
            {i: j["gpus"] for i, j in json.loads(kept.read_text()).items()}
            if kept.exists()
            else None
        )
        e = explain(snaps, events, args.floor, gpus, args.requeue)
        cells = " | ".join(f"{v:.0%}" for v in (e.as_made, e.ends, e.holds, e.both, e.later))
        print(f"| {d.name} | {e.rated} | {cells} | {e.passed} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
