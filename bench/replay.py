"""A day of the public Philly trace replayed through real Kueue: one shared pool against the
same GPUs split per team (issue 26).

The slice (``bench/data/philly-slice.csv``, its origin in ``bench/data/README.md``): 237
jobs of 4 Philly virtual clusters on 16 October 2017; the virtual clusters are the teams.
Time is compressed (``--hour`` seconds per trace hour, 6 by default: the day takes 144 s),
durations capped at ``--max-hours`` (6) trace hours and rounded to whole seconds (at least
1); the pool's ``--pool`` GPUs (32: 4 fake HGX nodes) are split among the teams in
proportion to their demand in the replayed jobs, and a job is capped at its team's share (8
GPUs a node; larger ones take whole nodes). ``--per-team N`` thins the slice (every k-th
job of a team): 45 by default (140 jobs; the scan at 22 and 21 GPUs), which took 16-24 min
on 2 shared cores (30, 97 jobs, took 9.9 min, but its static split hardly queues: see the
model below); the whole
slice (``--per-team 75 --hour 3 --scan 0.83,0.67``) took 26.8 min there, its pods
starting 7-19 s (p50) after admission on the saturated machine, and many jobs running into
their time limits.

Every job is a TrainJob submitted with ``KubernetesBackend`` at its scaled time to the test
control plane (tests/cluster: kube-apiserver, etcd, Kueue 0.17 with fair sharing turned on,
the fake HGX nodes of its node agent) and run by the controller (``python -m
aviflow.operator`` in a process of its own; ``bench/_replay_controller.py``: its forecast
re-estimates queued jobs every ``--forecast-tick`` second and reads ClusterQueues as
often, compressed like the trace). Its pods are a stand-in for the trainer (``HOLD``,
written to the work directory as the settings' ``python``): each holds its GPUs for the
job's scaled duration, beats as the runtime does (so the job is RUNNING and its time limit
counts) and checkpoints its progress every second in the job's run directory, so a
preempted job resumes where it stopped. The hold counts from the attempt's admission
(its Workload's ``Admitted`` time, read with kubectl; whole seconds): a pod took 2-20 s to
start on this loaded machine, which compression does not shrink, and would otherwise add
hours of trace time to every job. Each job's ``timeLimit`` is its duration plus 20 s and
a tenth (the limit counts from admission too, and a pod that has not started by then
fails). Node 0's pod logs a metric row every second, a step per second of hold toward
``total_steps`` (the hold), as a training script declares its steps: the controller's
estimates time a running job by that pace (:mod:`aviflow.pace`), and by its time limit only
before its first two rows. The node agent
carried this load (one small process per pod; the real runtime would start accelerate and
torch per pod, which 2 cores cannot do for this many jobs): no KWOK was needed.

Configurations, on the same nodes, one after the other, each in a namespace of its own
with a controller of its own:

- **static**: each team a ClusterQueue of its share, no cohort (a DevBox each);
- **shared**: the same nominal quotas in one cohort, unlimited borrowing, reclaim
  preemption (``reclaimWithinCohort: Any``) and Kueue's fair sharing;
- **shared N**: the shared pool at the fractions of ``--scan`` of the GPUs (quotas in the
  same proportions): the scan for the pool size that matches the static split's p90 wait.

Measured from each job's lifecycle events (the run store's; Kueue's admission times have
whole seconds only): its queue wait (every wait for admission, a preempted job's too),
its GPU holdings, preemptions and the GPU-hours the preempted attempts had held; and the
expected start (``status.expectedStart``) read from its TrainJob the first time it is seen
queued with one, against its first admission (its STARTING event, as the controller saw
Kueue admit it; without one, when its TrainJob was first seen past QUEUED). Printed in trace
hours: per team and overall mean, p50 and p90 wait, GPU allocation over the busy window
(first submission to last release; a team's against its nominal quota, so above 100% when
it borrows), the matching pool size, the estimates' error (median and p90 of |point -
started| / realised wait from the sample, for waits of at least ``--floor`` seconds, the point
being the estimate's expected start (its replay with every job ahead at the middle of its
window; the middle of the range where a status has none); its range's latest bound, as this
benchmark rated it before, and the range's middle alongside; an unbounded estimate rated by
its ``low``) and how many realised starts fell within the estimate's range. Targets: the shared pool reaches the static split's p90 wait with >= 1/3
fewer GPUs; median estimate error <= 20%. Quotas, the scan's sizes and the GPU-hours
preempted are as replayed (the shares of 32 GPUs), not the Philly cluster's.
Also a PNG (``--png``): p50 (dark) and p90 (light) waits per team and configuration.

Before the cluster starts, the ideal queue model (``_replay_model``: the same jobs admitted
by the same quota rules the moment quota allows, no start-up, release or clock cost) prints
its scan of the same slice: what the slice allows at best. ``--model`` prints it alone (also
with 1-3 s of start-up and release cost per attempt, as this machine's pods take) and starts
nothing, which is how to see whether a slice and load queue at all before spending minutes:
with ``--per-team 30`` (97 jobs) the ideal static split's p90 wait is 0, so no shared pool
under 28 GPUs can match it (the waits measured there came from pods' start-up and release);
with the default 45 a team (140 jobs) teams queue in the static split and the ideal match is
20.6 GPUs.

It also prints the controller's estimator run on the model's queues (``_replay_estimates``),
rated as the replay rates its estimates: by time limits, as the replay's forecasts know the
jobs ahead (a job's pace once it runs), and knowing each job's run time, which no forecast
knows. On the default slice the first misses the 20% target (45-53% at the latest bound in
the static split and the small pools), the second meets it (0-20%): the estimator's queue
rules hold, and what it lacks is how long the trace's jobs will run. Knowing only the
waiting jobs' run times, or only the running jobs' ends, says which part of the forecast
carries the error: the waiting jobs' in the static split (47% -> 7%), both in the small
pools (53% -> 38% and 31% at 21 GPUs).

    .venv/bin/python bench/replay.py [--per-team 45] [--hour 6] [--scan 0.69,0.66] [--model]

``--keep`` keeps the work directory with each configuration's first estimates, the pool
snapshots they were made from, every job's events and its GPUs and hold (``jobs.json``);
``bench/replay_explain.py`` reads them back (where the estimates' errors come from).

Builds the test control plane on first use (see tests/cluster/README.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (the test tree's helpers: tests/cluster, k8s, images)
import yaml
from _png import bar_chart
from _replay_estimates import medians, samples
from _replay_hold import stand_in
from _replay_model import scan
from _replay_stats import (
    Run,
    Sample,
    allocation,
    busy_window,
    estimate_errors,
    matching_gpus,
    parse,
    percentile,
    preemption_cost,
    release_lag,
    summary,
)
from _replay_trace import ReplayJob, cut, quotas, read, replay_jobs, scaled, time_limit
from admission import _true
from aviflow_pool import install_crd, pool_objects, run_store_volume
from controller_history import ControllerProcess
from kubernetes import client

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.estimate import Estimate
from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.forecast import POOL_FILE
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._informer import Informer
from aviflow.paging import read_pages
from aviflow.spec import TrainJob
from aviflow.store import RunStore
from aviflow_testcluster import Cluster, wait_for

HERE = Path(__file__).resolve().parent
SLICE = HERE / "data" / "philly-slice.csv"
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
COLORS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14)]


@dataclass
class Config:
    name: str
    quotas: dict[str, int]
    shared: bool

    @property
    def gpus(self) -> int:
        return sum(self.quotas.values())


@dataclass
class Result:
    config: Config
    runs: dict[str, Run]
    samples: list[Sample]
    lag: list[float]  # seconds each submission was late
    wall: float
    trainjobs: dict[str, str] = field(default_factory=dict)  # job -> final state
    release: list[float] = field(default_factory=list)  # pod exit -> SUCCEEDED, per job


class Watcher:
    """The namespace's TrainJobs (this process's clock): each one's state, its first
    expected start while queued, and when it was first seen past QUEUED (its realised
    start, to the estimates, where its events have no STARTING: that event's time is the
    admission as the controller saw it, this a status patch later; Kueue's admission
    times have whole seconds only)."""

    def __init__(self, api: client.ApiClient, ns: str, pool: Path | None = None) -> None:
        self.state: dict[str, str] = {}
        self.first: dict[str, tuple[float, Estimate]] = {}
        self.pool = pool  # the controller's snapshot, kept with each first estimate
        self.seen: dict[str, Any] = {}
        self.started: dict[str, float] = {}
        self._lock = threading.Lock()
        custom = client.CustomObjectsApi(api)
        self.informer = Informer(
            "trainjobs", custom.list_namespaced_custom_object, self._cr, resync=3600,
            group=GROUP, version=VERSION, namespace=ns, plural=PLURAL,
        )  # fmt: skip

    def _cr(self, obj: dict[str, Any]) -> None:
        name, status = obj["metadata"]["name"], obj.get("status") or {}
        state = status.get("state") or "QUEUED"
        with self._lock:
            self.state[name] = state
            if state != "QUEUED":
                self.started.setdefault(name, time.time())
            elif name not in self.first:
                est = Estimate.from_dict(status.get("expectedStart"))
                if est is not None and est.never is None and est.low is not None:
                    self.first[name] = (time.time(), est)
                    if self.pool is not None:
                        try:
                            self.seen[name] = json.loads(self.pool.read_text())
                        except (OSError, ValueError):
                            pass

    def finished(self, names: list[str]) -> int:
        with self._lock:
            return sum(self.state.get(n) in FINISHED for n in names)


def enable_fair_sharing(cluster: Cluster) -> None:
    """Kueue restarted with fair sharing (its Configuration's ``fairSharing``)."""
    path = cluster.workdir / "kueue.yaml"
    cfg = yaml.safe_load(path.read_text())
    cfg["fairSharing"] = {"preemptionStrategies": ["LessThanOrEqualToFinalShare"]}
    path.write_text(yaml.safe_dump(cfg))
    cluster.kill("kueue")
    cluster.restart("kueue")


def replay(
    cluster: Cluster, work: Path, cfg: Config, jobs: list[ReplayJob], args: argparse.Namespace
) -> Result:
    """``jobs`` submitted at their times to a pool configured as ``cfg``, until all end."""
    d = work / cfg.name.replace(" ", "-")
    d.mkdir()
    ns = cluster.create_namespace()
    runs = d / "runs"
    runs.mkdir()
    prefix = f"rp{uuid.uuid4().hex[:6]}"
    cohort = {"cohort": f"{prefix}-pool"} if cfg.shared else {}
    teams = {f"team-{t}": {"gpus": q, **cohort} for t, q in cfg.quotas.items()}
    objects = pool_objects(prefix, ns, teams) + run_store_volume(ns, str(runs), f"{prefix}-runs")
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    api = cluster.api_client()
    custom = client.CustomObjectsApi(api)

    def active(name: str) -> bool:
        cq = custom.get_cluster_custom_object(KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name)
        return _true(cq, "Active")

    for o in objects:
        if o["kind"] == "ClusterQueue":
            name = o["metadata"]["name"]
            wait_for(lambda name=name: active(name), 60, f"ClusterQueue {name} Active")
    raw = stand_in(d, ns, runs, sys.executable, cluster.kubectl_path, cluster.kubeconfig)
    backend = KubernetesBackend(ClusterSettings.from_dict(raw), api=api)
    watcher = Watcher(api, ns, runs / POOL_FILE if args.keep else None)
    watcher.informer.start()
    if not watcher.informer.wait_synced(60):
        raise TimeoutError("the TrainJob watcher did not sync")
    os.environ["BENCH_QUEUED_TICK"] = str(args.forecast_tick)
    ctl = ControllerProcess(d, cluster.kubeconfig, 30.0, script=HERE / "_replay_controller.py")
    ids: dict[str, ReplayJob] = {}
    lag: list[float] = []
    lock = threading.Lock()

    def submit(job: ReplayJob, due: float) -> None:
        spec = TrainJob.from_dict({
            "metadata": {"name": job.name},
            "spec": {
                "queue": f"team-{job.team}", "nodes": job.nodes,
                "gpusPerNode": job.gpus_per_node, "command": ["true"], "maxRestarts": 0,
                "timeLimit": f"{time_limit(job.hold)}s",
                "env": {"BENCH_HOLD": str(job.hold)},
            },
        })  # fmt: skip
        late = time.time() - due
        job_id = backend.submit(spec, build_bundle(spec))
        with lock:
            ids[job_id] = job
            lag.append(late)

    started = time.time()
    try:
        with ThreadPoolExecutor(8) as pool:
            futures = []
            for job in jobs:
                due = started + job.submit
                time.sleep(max(0.0, due - time.time()))
                futures.append(pool.submit(submit, job, due))
            for f in futures:
                f.result()
        wait_for(
            lambda: watcher.finished(list(ids)) == len(jobs), args.timeout,
            lambda: f"{cfg.name}: {len(jobs)} jobs finished ({watcher.finished(list(ids))})",
            interval=1.0,
        )  # fmt: skip
        wall = time.time() - started
    finally:
        ctl.stop()
        watcher.informer.stop()
    store = RunStore(runs)
    out: dict[str, Run] = {}
    samples: list[Sample] = []
    release: list[float] = []
    kinds: dict[str, list[tuple[str, float]]] = {}  # each job's events, as kept
    for job_id, job in ids.items():
        rd = store.get(job_id)
        events = read_pages(rd.events).items
        kinds[job_id] = [(e.type.value, e.time) for e in events]
        run = parse(job.team, job.gpus, kinds[job_id])
        out[job_id] = run
        beats = [rd.heartbeat(n) for n in range(job.nodes)]  # the run store's checked reads
        if (freed := release_lag(beats, kinds[job_id])) is not None:
            release.append(freed)
        if run.end != "SUCCEEDED":  # which, and why (its last event), for the run's log
            last = events[-1] if events else None
            why = f"{last.type.value}: {last.message[:200]}" if last else "no events"
            print(
                f"  {cfg.name}: {job.name} ({job.nodes} x {job.gpus_per_node} GPUs, hold "
                f"{job.hold} s, {len(run.preempted)} preemptions) {why}", flush=True,
            )  # fmt: skip
        first = watcher.first.get(job_id)
        start = next(  # its first admission as the controller recorded it (STARTING)
            (e.time for e in events if e.type.value == "STARTING"), watcher.started.get(job_id)
        )  # the watcher sees the status that says so later (the controller's patch)
        if first is not None and start is not None:
            at, est = first
            samples.append(Sample(at, est.low or at, est.high, start, est.expected))
    dump = [[s.at, s.low, s.high, s.started, s.expected] for s in samples]
    (d / "samples.json").write_text(json.dumps(dump))  # at, low, high, started, expected
    if args.keep:  # the snapshot each first estimate was seen with, each job's events
        seen = {
            i: {"team": j.team, "gpus": j.gpus, "hold": j.hold, "first": watcher.first[i][0],
                "estimate": watcher.first[i][1].to_dict(), "started": watcher.started.get(i),
                "pool": watcher.seen.get(i)}
            for i, j in ids.items() if i in watcher.first
        }  # fmt: skip
        (d / "snapshots.json").write_text(json.dumps(seen))
        (d / "jobs.json").write_text(json.dumps({
            i: {"team": j.team, "gpus": j.gpus, "hold": j.hold} for i, j in ids.items()
        }))  # fmt: skip
        (d / "events.json").write_text(json.dumps(kinds))
    return Result(cfg, out, samples, lag, wall, dict(watcher.state), release)


# -- the report ------------------------------------------------------------------------------------
def _h(v: float) -> str:
    return "—" if math.isnan(v) else f"{v:.2f}"


def wait_table(results: list[Result], hour: float) -> tuple[str, dict[tuple[str, str], Any]]:
    """Per configuration, team and overall: waits (trace hours), allocation, preemptions;
    and each (group, configuration)'s (p50, p90) for the chart."""
    lines = [
        "| configuration | GPUs | team | quota | jobs | mean wait h | p50 h | p90 h "
        "| allocation | preemptions | GPU-h preempted |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    chart: dict[tuple[str, str], Any] = {}
    for r in results:
        runs = list(r.runs.values())
        window = busy_window(runs)
        teams = sorted(r.config.quotas)
        for team in [*teams, "all"]:
            mine = runs if team == "all" else [x for x in runs if x.team == team]
            s = summary([x.wait for x in mine]).scaled(hour)
            quota = r.config.gpus if team == "all" else r.config.quotas[team]
            n, cost = preemption_cost(mine)
            lines.append(
                f"| {r.config.name} | {r.config.gpus} | {team} | {quota} | {s.n} | "
                f"{_h(s.mean)} | {_h(s.p50)} | {_h(s.p90)} | "
                f"{allocation(mine, quota, window):.0%} | {n} | {cost / hour:.1f} |"
            )
            chart[(team, r.config.name)] = (s.p50, s.p90)
    return "\n".join(lines), chart


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", type=Path, default=SLICE, help="a trace CSV")
    parser.add_argument("--per-team", type=int, default=45, help="at most N jobs a team")
    parser.add_argument("--hour", type=float, default=6.0, help="seconds per trace hour")
    parser.add_argument("--max-hours", type=float, default=6.0, help="durations' cap (trace h)")
    parser.add_argument("--pool", type=int, default=32, help="GPUs (8 a node)")
    parser.add_argument("--scan", default="0.69,0.66", help="smaller shared pools (fractions)")
    parser.add_argument("--forecast-tick", type=float, default=1.0, help="seconds")
    parser.add_argument("--floor", type=float, default=1.0, help="shortest wait rated (s)")
    parser.add_argument("--timeout", type=float, default=900.0, help="per configuration (s)")
    parser.add_argument("--png", type=Path, default=Path("replay-waits.png"))
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument(
        "--model", action="store_true",
        help="print the ideal queue model's scan only (no cluster; a second)",
    )  # fmt: skip
    args = parser.parse_args()
    rows = read(args.slice)
    teams = sorted({r.team for r in rows})
    rows = cut(rows, rows[0].submitted, math.inf, teams, args.per_team)
    team_quotas = quotas(rows, args.pool, args.max_hours)
    jobs = replay_jobs(rows, team_quotas, args.hour, args.max_hours)
    fractions = [float(f) for f in args.scan.split(",") if f.strip()]
    configs = [Config("static", team_quotas, False), Config("shared", team_quotas, True)]
    configs += [
        Config(f"shared {sum(q.values())}", q, True)
        for q in (scaled(team_quotas, f) for f in fractions)
    ]
    print(
        f"{len(jobs)} jobs of {len(teams)} teams, {args.hour:g} s per trace hour, pool "
        f"{args.pool} GPUs, quotas {team_quotas}", flush=True,
    )  # fmt: skip
    print(model_line(jobs, team_quotas, args.hour), flush=True)
    if args.model:
        for overhead in (1.0, 2.0, 3.0):
            print(model_line(jobs, team_quotas, args.hour, overhead))
    print(model_estimates(configs, jobs, args.floor), flush=True)
    if args.model:
        return 0
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the cluster stops (finally)
    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-replay-"))
    t0 = time.monotonic()
    cluster = Cluster.start(work / "cluster", host_mode=True, hgx_nodes=math.ceil(args.pool / 8))
    results: list[Result] = []
    try:
        install_crd(cluster)
        enable_fair_sharing(cluster)
        for cfg in configs:
            results.append(replay(cluster, work, cfg, jobs, args))
            r = results[-1]
            bad = sum(s != "SUCCEEDED" for s in r.trainjobs.values())
            up = [u for x in r.runs.values() for u in x.startup]
            print(
                f"{cfg.name}: {r.wall:.0f} s, submissions late p90 "
                f"{percentile(r.lag, 0.9):.2f} s, {bad} not succeeded, admission -> "
                f"running p50 {percentile(up, 0.5):.1f} s, p90 {percentile(up, 0.9):.1f} s, "
                f"pods' exit -> job ended p50 {percentile(r.release, 0.5):.1f} s, p90 "
                f"{percentile(r.release, 0.9):.1f} s",
                flush=True,
            )  # fmt: skip
    finally:
        cluster.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(results, args)
    print(f"(the whole run: {(time.monotonic() - t0) / 60:.1f} min)", flush=True)
    return 0


def model_line(
    jobs: list[ReplayJob], team_quotas: dict[str, int], hour: float, overhead: float = 0.0
) -> str:
    """The ideal queue model's :func:`~_replay_model.scan` of the same jobs, in trace hours;
    ``overhead`` seconds added to every attempt's hold."""
    found = scan(jobs, team_quotas, overhead)
    gpus, how = found.match
    points = found.shared[:: max(1, len(found.shared) // 6)]
    return (
        f"model ({'no' if not overhead else f'{overhead:g} s'} start-up and release cost): "
        f"static p90 {found.static_p90 / hour:.2f} h; shared "
        + ", ".join(f"{g}: {p / hour:.2f}" for g, p in points)
        + f" h; matches at {'—' if gpus is None else f'{gpus:.1f}'} GPUs ({how})"
    )


def model_estimates(configs: list[Config], jobs: list[ReplayJob], floor: float) -> str:
    """The controller's estimator on the ideal model's queues (:mod:`_replay_estimates`):
    median errors as the replay rates its own, by time limits (what the replay's estimates
    know of the jobs ahead), then at the latest bound knowing the waiting jobs' run times,
    the running jobs' ends, and both (what no forecast knows): where the error comes from."""
    cost = 2.0  # seconds of start-up and release per attempt, as this machine's pods take
    lines = [
        f"\nestimates on the model's queues (median abs err / wait; {cost:g} s start-up and "
        "release):",
        "| configuration | rated | by time limits: expected | latest | middle | knowing the "
        "waiting jobs' run times | the running jobs' ends | both |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in configs:
        high, middle, expected, n = medians(samples(jobs, c.quotas, c.shared, cost), floor)
        known = [
            medians(samples(jobs, c.quotas, c.shared, cost, knows=k), floor)[0]
            for k in ("queued", "running", "all")
        ]  # fmt: skip
        lines.append(
            f"| {c.name} | {n} | {expected:.0%} | {high:.0%} | {middle:.0%} | "
            + " | ".join(f"{k:.0%}" for k in known) + " |"
        )  # fmt: skip
    return "\n".join(lines)


def report(results: list[Result], args: argparse.Namespace) -> None:
    table, chart = wait_table(results, args.hour)
    print(table)
    static = next(r for r in results if r.config.name == "static")
    target = summary([x.wait for x in static.runs.values()]).p90
    points = [
        (r.config.gpus, summary([x.wait for x in r.runs.values()]).p90)
        for r in results if r.config.shared
    ]  # fmt: skip
    gpus, how = matching_gpus(points, target)
    print(
        "\nshared pool p90 wait by GPUs: "
        + ", ".join(f"{g}: {p / args.hour:.2f} h" for g, p in sorted(points))
        + f"; static split ({static.config.gpus} GPUs): {target / args.hour:.2f} h"
    )
    met = gpus is not None and gpus <= static.config.gpus * 2 / 3
    print(
        f"matching pool: {'—' if gpus is None else f'{gpus:.1f}'} GPUs ({how}); "
        f"target (<= {static.config.gpus * 2 / 3:.1f}): {'met' if met else 'not met'}"
    )
    print(
        f"\n| configuration | sampled | waited < {args.floor:g} s | rated | median abs err / wait "
        "| p90 | (latest bound: median | p90) | (middle of the range: median | p90) "
        "| within range |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    everything: list[float] = []
    for r in results:
        errors, short, within = estimate_errors(r.samples, args.floor, point="expected")
        highs, _, _ = estimate_errors(r.samples, args.floor, point="high")
        middles, _, _ = estimate_errors(r.samples, args.floor)
        everything += errors
        n = len(r.samples)
        print(
            f"| {r.config.name} | {n} | {short} | {len(errors)} | {percentile(errors, 0.5):.0%} | "
            f"{percentile(errors, 0.9):.0%} | {percentile(highs, 0.5):.0%} | "
            f"{percentile(highs, 0.9):.0%} | {percentile(middles, 0.5):.0%} | "
            f"{percentile(middles, 0.9):.0%} | {within / n if n else math.nan:.0%} |"
        )
    median = percentile(everything, 0.5)
    print(
        f"estimates, all configurations: median {median:.0%}, p90 "
        f"{percentile(everything, 0.9):.0%} of {len(everything)}; target (<= 20%): "
        f"{'met' if median <= 0.2 else 'not met'}"
    )
    groups = [*sorted(static.config.quotas), "all"]
    series = [(r.config.name, COLORS[i % len(COLORS)]) for i, r in enumerate(results)]
    args.png.write_bytes(
        bar_chart("QUEUE WAIT (TRACE HOURS): P50 DARK, P90 LIGHT", groups, series, chart)
    )
    print(f"chart: {args.png}")


if __name__ == "__main__":
    sys.exit(main())
