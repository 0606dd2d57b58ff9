"""Admission latency of TrainJobs on the test control plane, against plain Kueue Jobs, in
two regimes: the pool **with room** and the pool **saturated**.

4 team queues of 8 GPUs each (32 on the 4 fake HGX nodes); every job is 1 node x 1 GPU
running a command that exits at once. Each scenario is measured twice:

- **plain Job**: each job's attempt Job (the same builder, the same pods running the same
  runtime), written to the run store and created directly with its Kueue labels: what Kueue
  alone costs;
- **TrainJob**: through the controller, ``python -m aviflow.operator`` in a process of its
  own (as it runs on a cluster), submitted with ``KubernetesBackend``.

Scenarios: ``room burst`` (``--room-jobs`` jobs at once, fewer than the free GPUs: nothing
queues; ``--room-runs`` bursts of each kind, taking turns, their jobs pooled: one burst of 20
varies by half from run to run), ``room single`` (``--singles`` jobs one at a time, each
waited for; plain and TrainJob alternate; 20 of each: a p99 of a few is their slowest) and
``saturated`` (``--jobs`` at once, more than the pool holds). Each row: from the client's
create call, when an observer in this process first sees the attempt Job (the controller's
reaction; ~0 for a plain Job), its Workload ``Admitted``, and its pod running; p50 and p99;
admissions per second over a burst; then TrainJob / plain Job ratios (target <= 1.2 at p50
and p99). The observer's clock is this process's: the API server's condition times have
whole seconds only. Also submit -> first training step of a 2 x 2 job on the cluster vs the
local backend (``--no-first-step`` leaves it out), and, measured first with no controller
running, the CPU each kind of object a submission makes costs the control plane's processes
(``bench/_object_costs.py``; ``--no-costs`` leaves it out).

    .venv/bin/python bench/admission.py [--room-jobs 20] [--room-runs 3] [--singles 20]
                                        [--jobs 64] [--workers N] [--no-costs]

Builds the test control plane on first use (see tests/cluster/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (the test tree's helpers: tests/cluster, k8s, images)
import yaml
from _object_costs import object_costs
from aviflow_pool import pool_objects, run_store_volume
from kubernetes import client

import aviflow
from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION, committed
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION, owner_job
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._informer import Informer
from aviflow.spec import TrainJob
from aviflow.store import RunStore
from aviflow_testcluster import Cluster, wait_for

ROOT = Path(__file__).resolve().parent.parent
TEAMS = [f"team-{i}" for i in range(4)]
GPUS_PER_TEAM = 8
KINDS = ("plain Job", "TrainJob")
Obj = dict[str, Any]


def _true(obj: Obj, kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _started(pod: Obj) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") in ("Running", "Succeeded"):
        return True
    return any(
        "running" in (s.get("state") or {}) or "terminated" in (s.get("state") or {})
        for s in status.get("containerStatuses") or []
    )


class Observer:
    """First-seen times (this process's clock) per Job name: the Job, its Workload admitted,
    its pod running, the Job finished (list+watch, as the controller's own informers)."""

    def __init__(self, api: client.ApiClient, ns: str) -> None:
        self.seen: dict[str, float] = {}
        self.admitted: dict[str, float] = {}
        self.running: dict[str, float] = {}
        self.finished: dict[str, str] = {}
        self._lock = threading.Lock()
        batch, core = client.BatchV1Api(api), client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        resync = 3600.0
        self._informers = [
            Informer("jobs", batch.list_namespaced_job, self._job, resync=resync, namespace=ns),
            Informer("pods", core.list_namespaced_pod, self._pod, resync=resync, namespace=ns),
            Informer(
                "workloads", custom.list_namespaced_custom_object, self._workload,
                resync=resync, group=KUEUE_GROUP, version=KUEUE_VERSION, namespace=ns,
                plural="workloads",
            ),
        ]  # fmt: skip

    def _first(self, into: dict[str, float], name: str | None) -> None:
        if name:
            with self._lock:
                into.setdefault(name, time.time())

    def _job(self, obj: Obj) -> None:
        name = obj["metadata"]["name"]
        self._first(self.seen, name)
        for kind in ("Complete", "Failed"):
            if _true(obj, kind):
                with self._lock:
                    self.finished.setdefault(name, kind)

    def _pod(self, obj: Obj) -> None:
        if _started(obj):
            self._first(self.running, (obj["metadata"].get("labels") or {}).get("job-name"))

    def _workload(self, obj: Obj) -> None:
        if _true(obj, "Admitted"):
            self._first(self.admitted, owner_job(obj))

    def start(self) -> None:
        for inf in self._informers:
            inf.start()
        for inf in self._informers:
            if not inf.wait_synced(60):
                raise TimeoutError(f"the observer's {inf.name} informer did not sync")

    def stop(self) -> None:
        for inf in self._informers:
            inf.stop()

    def wait(self, names: list[str], timeout: float = 1800) -> None:
        """Until every Job of ``names`` was admitted, ran and finished."""

        def done() -> bool:
            with self._lock:
                return all(
                    n in self.admitted and n in self.running and n in self.finished for n in names
                )

        def what() -> str:
            with self._lock:
                return (
                    f"{len(names)} jobs admitted, running and finished (admitted "
                    f"{sum(n in self.admitted for n in names)}, running "
                    f"{sum(n in self.running for n in names)}, finished "
                    f"{sum(n in self.finished for n in names)})"
                )

        wait_for(done, timeout, what, interval=0.5)
        failed = [n for n in names if self.finished[n] != "Complete"]
        if failed:
            print(f"warning: {len(failed)} jobs failed, e.g. {failed[0]}", flush=True)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


@dataclass
class Row:
    """One scenario measured one way: seconds from each Job's creation call."""

    scenario: str
    kind: str
    to_job: list[float]
    admitted: list[float]
    running: list[float]
    per_s: float | None  # admissions per second over a burst

    @classmethod
    def of(
        cls, scenario: str, kind: str, obs: Observer, created: dict[str, float], burst: bool
    ) -> Row:
        names = list(created)
        adm = [obs.admitted[n] - created[n] for n in names]
        span = max(obs.admitted[n] for n in names) - min(created.values())
        return cls(
            scenario, kind, [obs.seen[n] - created[n] for n in names], adm,
            [obs.running[n] - created[n] for n in names],
            len(names) / span if burst and span > 0 else None,
        )  # fmt: skip

    @classmethod
    def pooled(cls, rows: list[Row]) -> Row:
        """Several runs of one scenario and kind as one row: their jobs together, the
        median of their admission rates."""
        rates = sorted(r.per_s for r in rows if r.per_s is not None)
        return cls(
            rows[0].scenario, rows[0].kind, [v for r in rows for v in r.to_job],
            [v for r in rows for v in r.admitted], [v for r in rows for v in r.running],
            rates[len(rates) // 2] if rates else None,
        )  # fmt: skip

    def stats(self) -> dict[str, float | None]:
        return {
            "job_p50": pct(self.to_job, 0.5),
            "admit_p50": pct(self.admitted, 0.5), "admit_p99": pct(self.admitted, 0.99),
            "run_p50": pct(self.running, 0.5), "run_p99": pct(self.running, 0.99),
            "per_s": self.per_s,
        }  # fmt: skip


COLUMNS = [
    ("-> Job p50", "job_p50"), ("-> admitted p50", "admit_p50"), ("p99", "admit_p99"),
    ("-> running p50", "run_p50"), ("p99", "run_p99"), ("admissions/s", "per_s"),
]  # fmt: skip
RATIOS = ("admit_p50", "admit_p99", "run_p50", "run_p99", "per_s")  # -> Job: ~0 for plain Jobs


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table, each scenario's TrainJob / plain Job ratios after it."""

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    def cell(key: str, v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}" + ("" if key == "per_s" else " s")

    def ratio(ours: float | None, base: float | None) -> str:
        return "—" if ours is None or not base else f"**{ours / base:.2f}**"

    out = [
        line(["scenario", "jobs", "submitted as", *(head for head, _ in COLUMNS)]),
        "|---|---:|---|" + "---:|" * len(COLUMNS),
    ]
    by: dict[str, dict[str, Row]] = {}
    for r in rows:
        by.setdefault(r.scenario, {})[r.kind] = r
    for scenario, kinds in by.items():
        stats = {kind: r.stats() for kind, r in kinds.items()}
        for kind, r in kinds.items():
            values = [cell(key, stats[kind][key]) for _, key in COLUMNS]
            out.append(line([scenario, str(len(r.admitted)), kind, *values]))
        if all(kind in stats for kind in KINDS):
            base, ours = (stats[kind] for kind in KINDS)
            values = [ratio(ours[k], base[k]) if k in RATIOS else "" for _, k in COLUMNS]
            out.append(line([scenario, "", "TrainJob / plain", *values]))
    return "\n".join(out)


class Bench:
    """The pool, the controller's process, the observer, and one way to submit each kind."""

    def __init__(self, cluster: Cluster, work: Path) -> None:
        self.cluster, self.work = cluster, work
        cluster.kubectl("apply", "--server-side", "-f", "-", input=committed())
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}")
        self.ns = ns = cluster.create_namespace()
        runs = work / "runs"
        runs.mkdir()
        prefix = f"b{uuid.uuid4().hex[:6]}"
        teams = {t: {"gpus": GPUS_PER_TEAM} for t in TEAMS}
        objects = pool_objects(prefix, ns, teams) + run_store_volume(
            ns, str(runs), f"{prefix}-runs"
        )
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
        self.api = cluster.api_client()
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self._wait_active([o["metadata"]["name"] for o in objects if o["kind"] == "ClusterQueue"])
        # host mode: pods run this checkout's Python on this machine's file system, where
        # every mountPath is made; keep them in the work dir (the defaults, /aviflow/runs,
        # /tmp and /home/aviflow, would litter / and hide this work dir's /tmp from the pods)
        mounts = work / "mounts"
        raw = {
            "namespace": ns,
            "python": sys.executable,
            "image": "aviflow/trainer:bench",
            "runs": {"localPath": str(runs), "mountPath": str(mounts / "runs")},
            "scratch": [str(mounts / "tmp"), str(mounts / "home")],
        }
        self.settings = ClusterSettings.from_dict(raw)
        (work / "settings.yaml").write_text(yaml.safe_dump(raw))
        self.store = RunStore(runs)
        self.backend = KubernetesBackend(self.settings, api=self.api)
        self.observer = Observer(self.api, ns)
        self.controller: subprocess.Popen[bytes] | None = None
        self.rows: list[Row] = []

    def _wait_active(self, queues: list[str]) -> None:
        for name in queues:
            wait_for(
                lambda name=name: _true(
                    self.custom.get_cluster_custom_object(
                        KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", name
                    ),
                    "Active",
                ),
                60,
                f"ClusterQueue {name} Active",
            )

    def start_controller(self, workers: int | None = None) -> None:
        log = self.work / "controller.log"
        self.controller = subprocess.Popen(
            [
                sys.executable, "-m", "aviflow.operator", "--settings",
                str(self.work / "settings.yaml"), "--kubeconfig", str(self.cluster.kubeconfig),
                *(["--workers", str(workers)] if workers else []),
            ],
            stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        wait_for(lambda: "watching TrainJobs" in log.read_text(), 120, "the controller started")

    def stop_controller(self) -> None:
        if self.controller is not None and self.controller.poll() is None:
            os.kill(self.controller.pid, signal.SIGTERM)
            try:
                self.controller.wait(30)
            except subprocess.TimeoutExpired:
                self.controller.kill()
                self.controller.wait()

    # -- submitting ------------------------------------------------------------------------------
    @staticmethod
    def job(name: str, i: int) -> TrainJob:
        return TrainJob.from_dict(
            {"metadata": {"name": name}, "spec": {"queue": TEAMS[i % 4], "command": ["true"]}}
        )

    def plain(self, job: TrainJob) -> tuple[str, float]:
        """The attempt Job the controller would create for ``job``, created directly (no
        TrainJob, no owner), after writing the run store as ``submit`` does."""
        t = time.time()
        bundle = build_bundle(job)
        run = self.store.create(job, bundle.store_files(), "bench", backend="kubernetes")
        body = m.attempt_job(job, m.JobRef(run.id, "", run.path.parent.name), 1, self.settings)
        del body["metadata"]["ownerReferences"]
        body["metadata"]["labels"]["bench"] = "plain"
        self.batch.create_namespaced_job(self.ns, body)
        return body["metadata"]["name"], t

    def trainjob(self, job: TrainJob) -> tuple[str, float]:
        t = time.time()
        job_id = self.backend.submit(job, build_bundle(job))
        return m.attempt_name(job_id, 1), t

    def submitter(self, kind: str) -> Callable[[TrainJob], tuple[str, float]]:
        return self.plain if kind == "plain Job" else self.trainjob

    # -- scenarios -------------------------------------------------------------------------------
    def burst(self, scenario: str, n: int, runs: int = 1) -> None:
        """``runs`` bursts of ``n`` jobs of each kind, the kinds taking turns to go first
        (a machine's drift falls on both); each kind's runs pooled in one row."""
        rows: dict[str, list[Row]] = {kind: [] for kind in KINDS}
        for r in range(runs):
            for kind in KINDS if r % 2 == 0 else reversed(KINDS):
                tag = "p" if kind == "plain Job" else "t"
                jobs = [self.job(f"{tag}{scenario[:4]}{r}-{i:04d}", i) for i in range(n)]
                with ThreadPoolExecutor(8) as pool:
                    created = dict(pool.map(self.submitter(kind), jobs))
                self.observer.wait(list(created))
                rows[kind].append(Row.of(scenario, kind, self.observer, created, burst=True))
                self.clean()
        self.rows += [Row.pooled(rows[kind]) for kind in KINDS]

    def singles(self, scenario: str, n: int) -> None:
        created: dict[str, dict[str, float]] = {k: {} for k in KINDS}
        for i in range(n):
            for kind in KINDS if i % 2 == 0 else reversed(KINDS):
                tag = "p" if kind == "plain Job" else "t"
                name, t = self.submitter(kind)(self.job(f"{tag}single-{i:04d}", i))
                created[kind][name] = t
                self.observer.wait([name])
        for kind in KINDS:
            self.rows.append(Row.of(scenario, kind, self.observer, created[kind], burst=False))
        self.clean()

    def clean(self) -> None:
        """Delete every Job and TrainJob of the namespace; wait until no pod is left."""
        self.custom.delete_collection_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL)
        self.batch.delete_collection_namespaced_job(self.ns, propagation_policy="Background")
        core = client.CoreV1Api(self.api)
        wait_for(lambda: not core.list_namespaced_pod(self.ns).items, 600, "no pods left")

    def first_step(self) -> str:
        tiny = (ROOT / "aviflow" / "examples" / "tiny_regression.py").read_text()
        spec = {
            "metadata": {"name": "first-step"},
            "spec": {
                "nodes": 2, "gpusPerNode": 2, "queue": TEAMS[0], "script": tiny,
                "env": {"TINY_STEPS": "5"},
            },
        }  # fmt: skip
        times = {}
        local = LocalBackend(root=self.work / "local")
        for name, backend in (("local", local), ("cluster", self.backend)):
            t = time.time()
            job = aviflow.submit(spec, backend)
            wait_for(
                lambda job=job: job.metric_rows(), 600, f"the first step ({name})", interval=0.1
            )
            times[name] = time.time() - t
            job.wait(timeout=600)
        return (
            f"submit -> first step, 2 x 2: local {times['local']:.1f} s, cluster "
            f"{times['cluster']:.1f} s, ratio {times['cluster'] / times['local']:.2f}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--room-jobs", type=int, default=20, help="the burst with room")
    parser.add_argument("--room-runs", type=int, default=3, help="bursts with room, each kind")
    parser.add_argument("--singles", type=int, default=20, help="jobs one at a time, each kind")
    parser.add_argument("--jobs", type=int, default=64, help="the saturated burst")
    parser.add_argument("--workers", type=int, help="the controller's (default: its own)")
    parser.add_argument("--no-first-step", dest="first_step", action="store_false")
    parser.add_argument(
        "--no-costs", dest="costs", action="store_false", help="no CPU per object table"
    )
    args = parser.parse_args()
    if args.room_jobs >= len(TEAMS) * GPUS_PER_TEAM:
        parser.error(f"--room-jobs: fewer than the pool's {len(TEAMS) * GPUS_PER_TEAM} GPUs")
    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-admission-"))
    started = time.monotonic()
    cluster = Cluster.start(work / "cluster", host_mode=True)
    bench: Bench | None = None
    try:
        bench = Bench(cluster, work)
        # before the controller starts: nothing reconciles the TrainJobs made there
        costs = (
            object_costs(bench.api, bench.ns, bench.settings, bench.job("c", 0))
            if args.costs
            else ""
        )
        bench.observer.start()
        bench.start_controller(args.workers)
        lines = []
        for scenario, run in (
            (
                f"room burst ({args.room_runs} x {args.room_jobs})",
                lambda s: bench.burst(s, args.room_jobs, args.room_runs),
            ),
            (f"room single ({args.singles})", lambda s: bench.singles(s, args.singles)),
            (f"saturated ({args.jobs})", lambda s: bench.burst(s, args.jobs)),
        ):
            t = time.monotonic()
            run(scenario)
            print(f"{scenario}: {time.monotonic() - t:.0f} s", file=sys.stderr, flush=True)
        if args.first_step:
            lines.append(bench.first_step())
        print(table(bench.rows), flush=True)
        for line in lines:
            print(line, flush=True)
        if costs:
            print(f"\n{costs}", flush=True)
        print(f"(the whole run: {(time.monotonic() - started) / 60:.1f} min)", flush=True)
        print(f"logs (the controller's, the control plane's): {work}", file=sys.stderr)
    finally:
        if bench is not None:
            bench.stop_controller()
            bench.observer.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
