"""The controller's cost with finished TrainJobs in its namespace, against none (issue 24).

On a private test control plane (1 fake HGX node, Kueue, one team queue of 8 GPUs) the
namespace is given 0, then 100, then 1,000 (``--history``) finished TrainJobs, each
made as a real one ends: submitted with ``KubernetesBackend`` (its run directory, then its
TrainJob), bound as the controller binds it (``k8s.json``, no longer pending), its events
and status written by the same :class:`~aviflow.lifecycle.Lifecycle` the controller drives
(queued, admitted, running, then succeeded, failed after a restart, or cancelled) and its
TrainJob's status patched to that end; created in ``--threads`` threads. Their attempt
Jobs are gone, as ``finishedTtlSeconds`` (1 hour) after their end.

At each size a fresh controller (``python -m aviflow.operator``, in a process of its own,
``--resync`` 3 s, no leader election; counted by ``bench/_counted_controller.py``) starts,
idles for ``--resyncs`` resyncs, then takes ``--probes`` new small jobs one at a time
(each waited for). Measured per size:

- start: seconds from the process's start to its informers synced, and its CPU seconds;
- per resync, idle: the controller's CPU milliseconds (its threads' ``schedstat``), its
  API requests, its reconciles and the reconciles that read a run directory;
- RSS after the probes (``/proc/<pid>/status``);
- a new job's latency: from the submit call to its attempt Job, and to its Workload (seen
  by an observer in this process), p50 and max.

Printed: a table, and each size's ratio to no history (target <= 1.5 for the steady-state
columns). Everything (the cluster, the controller, the work directory) goes at the end;
``--keep`` keeps the work directory (logs). ``--compare CHECKOUT`` also measures another
checkout's controller (e.g. the main branch's) on the same cluster and history, in turn.

    .venv/bin/python bench/controller_history.py [--history 0,100,1000] [--resyncs 15]

Builds the test control plane on first use (see tests/cluster/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
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
from aviflow_pool import pool_objects, run_store_volume
from kubernetes import client

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION, committed
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION, owner_job
from aviflow.k8s.settings import ClusterSettings
from aviflow.lifecycle import (
    Admitted,
    AttemptEnded,
    CancelRequested,
    Lifecycle,
    NodesUp,
    Observation,
    Policy,
)
from aviflow.operator._binding import BINDING
from aviflow.operator._informer import Informer
from aviflow.records import Event, FailureInfo
from aviflow.spec import TrainJob
from aviflow.store import RunStore, atomic_write
from aviflow_testcluster import Cluster, wait_for

HERE = Path(__file__).resolve().parent
TEAM = "team-0"
TICKS = os.sysconf("SC_CLK_TCK")
Obj = dict[str, Any]
# what a failed rank's record carries, and so its TrainJob's status (about 1 KB)
TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/code/train.py", line {100 + k}, in step_{k}\n    loss = model(batch)\n'
        for k in range(12)
    )
    + "RuntimeError: loss is nan\n"
)


# -- finished TrainJobs, as the controller leaves them ----------------------------------------------
def ended(job: TrainJob, outcome: str, t: float) -> Lifecycle:
    """The lifecycle of ``job`` submitted at ``t`` that ended with ``outcome``
    (``succeeded``; ``failed``: rank 0 exits 1 on every attempt, restarts exhausted;
    ``cancelled``: while running), driven by the observations the controller makes."""
    spec = job.spec
    lc = Lifecycle.from_events(Policy.from_spec(spec, readmit=True), [])
    lc = lc.submitted(t).lifecycle

    def feed(obs: Observation) -> None:
        nonlocal lc
        lc = lc.observe(obs).lifecycle

    while not lc.state.is_finished():
        t += 5
        feed(Admitted(t, spec.total_gpus))
        t += 20
        feed(NodesUp(t, lc.attempt))
        t += 600
        nodes = range(spec.nodes)
        if outcome == "cancelled":
            feed(CancelRequested(t, "cancelled by bench-user"))
            feed(AttemptEnded(t + 2, lc.attempt, dict.fromkeys(nodes)))
        elif outcome == "failed":
            why = FailureInfo(
                rank=0, node=0, attempt=lc.attempt, exception="RuntimeError",
                message="loss is nan", exit_code=1, time=t, traceback=TRACEBACK,
            )  # fmt: skip
            feed(AttemptEnded(t, lc.attempt, {n: 1 if n == 0 else None for n in nodes}, why))
        else:
            feed(AttemptEnded(t, lc.attempt, dict.fromkeys(nodes, 0)))
    return lc


def outcome(i: int) -> str:
    """8 in 10 succeed, 1 fails, 1 is cancelled."""
    return {8: "failed", 9: "cancelled"}.get(i % 10, "succeeded")


# -- the controller's process ---------------------------------------------------------------------
@dataclass
class Sample:
    """The controller's process at one moment: CPU seconds, RSS and its counters."""

    at: float
    cpu: float
    rss: int
    reconciles: int
    full: int
    requests: dict[str, int] = field(default_factory=dict)


def cpu_seconds(pid: int) -> float:
    """The process's CPU time: its threads' (``/proc/<pid>/task/*/schedstat``, nanoseconds;
    the controller's threads live as long as it does), else user + system time in clock
    ticks (``/proc/<pid>/stat``, 10 ms)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        return sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime


class ControllerProcess:
    """``python -m aviflow.operator`` (counted; ``script``: a wrapper of it), started and
    stopped by this benchmark."""

    def __init__(
        self,
        work: Path,
        kubeconfig: Path,
        resync: float,
        source: Path | None = None,
        script: Path = HERE / "_counted_controller.py",
    ) -> None:
        env = {**os.environ, "BENCH_COUNTS": str(work / "controller-counts.json")}
        if source is not None:  # another checkout's controller (--compare)
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(source), env.get("PYTHONPATH")]))
        self.log = work / "controller.log"
        self.counts = work / "controller-counts.json"
        self.counts.unlink(missing_ok=True)
        self.started = time.monotonic()
        with self.log.open("ab") as out:
            mark = out.tell()  # this start's lines, not an earlier one's
            self.proc = subprocess.Popen(
                [
                    sys.executable, str(script),
                    "--settings", str(work / "settings.yaml"), "--kubeconfig", str(kubeconfig),
                    "--resync", str(resync), "--no-leader-elect",
                ],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env,
            )  # fmt: skip
        self._seq = 0

        def synced() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the controller exited; see {self.log}")
            with self.log.open("rb") as f:
                f.seek(mark)
                return b"watching TrainJobs" in f.read()

        try:
            wait_for(synced, 600, "the controller started", interval=0.05)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - self.started

    def sample(self) -> Sample:
        """CPU, RSS and counters now (the counters on SIGUSR1)."""
        cpu = cpu_seconds(self.proc.pid)
        rss = 0
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
        self._seq += 1
        os.kill(self.proc.pid, signal.SIGUSR1)

        def dumped() -> bool:
            try:
                return int(json.loads(self.counts.read_text())["seq"]) >= self._seq
            except (OSError, ValueError, KeyError):
                return False

        wait_for(dumped, 10, "the controller's counters", interval=0.02)
        data = json.loads(self.counts.read_text())
        return Sample(
            time.monotonic(), cpu, rss, data["reconciles"], data["full_reconciles"],
            data["requests"],
        )  # fmt: skip

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# -- the benchmark ---------------------------------------------------------------------------------
class Observer:
    """First-seen times (this process's clock) of attempt Jobs and their Workloads."""

    def __init__(self, api: client.ApiClient, ns: str) -> None:
        self.jobs: dict[str, float] = {}
        self.workloads: dict[str, float] = {}
        self._lock = threading.Lock()
        batch, custom = client.BatchV1Api(api), client.CustomObjectsApi(api)
        self.informers = [
            Informer("jobs", batch.list_namespaced_job, self._job, resync=3600, namespace=ns),
            Informer(
                "workloads", custom.list_namespaced_custom_object, self._workload,
                resync=3600, group=KUEUE_GROUP, version=KUEUE_VERSION, namespace=ns,
                plural="workloads",
            ),
        ]  # fmt: skip

    def _job(self, obj: Obj) -> None:
        with self._lock:
            self.jobs.setdefault(obj["metadata"]["name"], time.time())

    def _workload(self, obj: Obj) -> None:
        name = owner_job(obj)
        if name:
            with self._lock:
                self.workloads.setdefault(name, time.time())

    def start(self) -> None:
        for inf in self.informers:
            inf.start()
        for inf in self.informers:
            if not inf.wait_synced(60):
                raise TimeoutError(f"the observer's {inf.name} informer did not sync")

    def stop(self) -> None:
        for inf in self.informers:
            inf.stop()


@dataclass
class Row:
    """One history size, measured."""

    controller: str
    history: int
    start_s: float
    start_cpu: float
    cpu_ms: float  # per resync
    requests: float  # per resync
    reconciles: float  # per resync
    full: float  # per resync
    rss_mib: float
    to_job: list[float]
    to_workload: list[float]
    request_kinds: dict[str, float]


class Bench:
    """The namespace, its queue and run store, and a way to fill it with history."""

    def __init__(self, cluster: Cluster, work: Path, args: argparse.Namespace) -> None:
        self.cluster, self.work, self.args = cluster, work, args
        cluster.kubectl("apply", "--server-side", "-f", "-", input=committed())
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}")
        wait_for(
            lambda: cluster.kubectl("get", "trainjobs", "-A", check=False).returncode == 0,
            60,
            "trainjobs served",
        )
        self.ns = ns = cluster.create_namespace()
        runs = work / "runs"
        runs.mkdir()
        prefix = f"h{uuid.uuid4().hex[:6]}"
        objects = pool_objects(prefix, ns, {TEAM: {"gpus": 8}})
        objects += run_store_volume(ns, str(runs), f"{prefix}-runs")
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
        self.objects = objects
        self.api = cluster.api_client()
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        queue = f"{prefix}-{TEAM}"
        wait_for(
            lambda: any(
                c.get("type") == "Active" and c.get("status") == "True"
                for c in self.custom.get_cluster_custom_object(
                    KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", queue
                )
                .get("status", {})
                .get("conditions", [])
            ),
            60,
            f"ClusterQueue {queue} Active",
        )
        # host mode: the probes' pods run this checkout's Python here; their mounts in the
        # work directory (see bench/admission.py)
        mounts = work / "mounts"
        raw = {
            "namespace": ns,
            "python": sys.executable,
            "image": "aviflow/trainer:bench",
            "runs": {"localPath": str(runs), "mountPath": str(mounts / "runs")},
            "scratch": [str(mounts / "tmp"), str(mounts / "home")],
        }
        (work / "settings.yaml").write_text(yaml.safe_dump(raw))
        self.settings = ClusterSettings.from_dict(raw)
        self.store = RunStore(runs)
        self.backend = KubernetesBackend(self.settings, api=self.api)
        self.observer = Observer(self.api, ns)
        self.history = 0
        self.probes = 0

    # -- history ----------------------------------------------------------------------------------
    def finished(self, i: int, now: float) -> None:
        """Finished TrainJob number ``i``: as a submission and the controller leave it."""
        nodes = 1 + i % 2
        job = TrainJob.from_dict(
            {
                "metadata": {"name": f"hist-{i}", "labels": {"experiment": f"e{i % 7}"}},
                "spec": {
                    "queue": TEAM, "nodes": nodes, "gpusPerNode": 4, "maxRestarts": 1,
                    "command": ["python", "train.py", f"--seed={i}"],
                },
            }
        )  # fmt: skip
        job_id = self.backend.submit(job, build_bundle(job))
        cr = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job_id)
        run = self.store.get(job_id)
        binding = {"namespace": self.ns, "uid": cr["metadata"]["uid"]}
        atomic_write(run.path / BINDING, json.dumps(binding))  # as Binder.run_dir
        self.store.settle(job_id)
        lc = ended(job, outcome(i), now - 3600 - 60 * (self.args.history[-1] - i))
        events: list[Event] = list(lc.events)
        run.record(events, lc.status())
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.ns, PLURAL, job_id, {"status": lc.status().to_dict()}
        )

    def grow(self, size: int) -> float:
        """Add finished TrainJobs up to ``size``; the seconds it took."""
        t, now = time.monotonic(), time.time()
        with ThreadPoolExecutor(self.args.threads) as pool:
            list(pool.map(lambda i: self.finished(i, now), range(self.history, size)))
        self.history = size
        return time.monotonic() - t

    # -- one size ---------------------------------------------------------------------------------
    def probe(self) -> tuple[str, float, float]:
        """A new small job: seconds from the submit call to its attempt Job, and to its
        Workload."""
        self.probes += 1
        job = TrainJob.from_dict(
            {
                "metadata": {"name": f"probe-{self.probes}"},
                "spec": {"queue": TEAM, "command": ["true"]},
            }
        )
        t = time.time()
        job_id = self.backend.submit(job, build_bundle(job))
        name = m.attempt_name(job_id, 1)
        obs = self.observer
        wait_for(
            lambda: name in obs.jobs and name in obs.workloads, 120, f"{name} and its Workload"
        )
        return job_id, obs.jobs[name] - t, obs.workloads[name] - t

    def measure(self, label: str, source: Path | None) -> Row:
        args = self.args
        ctl = ControllerProcess(self.work, self.cluster.kubeconfig, args.resync, source)
        try:
            start_cpu = ctl.sample().cpu
            time.sleep(args.resync)  # the start's last callbacks, the first sweep
            first = ctl.sample()
            time.sleep(args.resync * args.resyncs)
            last = ctl.sample()
            probes = []
            for _ in range(args.probes):
                probes.append(self.probe())
                time.sleep(0.5)
            ids = [p[0] for p in probes]
            wait_for(lambda: all(self._final(i) for i in ids), 300, "the probes finished")
            rss = ctl.sample().rss
        finally:
            ctl.stop()
        self.clean(ids)
        n = args.resyncs
        kinds = {
            k: (last.requests.get(k, 0) - first.requests.get(k, 0)) / n
            for k in set(last.requests) | set(first.requests)
        }
        return Row(
            controller=label,
            history=self.history,
            start_s=ctl.start_seconds,
            start_cpu=start_cpu,
            cpu_ms=1000 * (last.cpu - first.cpu) / n,
            requests=sum(kinds.values()),
            reconciles=(last.reconciles - first.reconciles) / n,
            full=(last.full - first.full) / n,
            rss_mib=rss / 2**20,
            to_job=[p[1] for p in probes],
            to_workload=[p[2] for p in probes],
            request_kinds={k: v for k, v in kinds.items() if v},
        )

    def _final(self, job_id: str) -> bool:
        cr = self.custom.get_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job_id)
        return (cr.get("status") or {}).get("state") in ("SUCCEEDED", "FAILED", "CANCELLED")

    def clean(self, probe_ids: list[str]) -> None:
        """The probes go (their TrainJobs, and with them their Jobs): the next size has the
        history alone."""
        for job_id in probe_ids:
            self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.ns, PLURAL, job_id)
        core = client.CoreV1Api(self.api)
        wait_for(
            lambda: (
                not self.batch.list_namespaced_job(self.ns).items
                and not core.list_namespaced_pod(self.ns).items
            ),
            300,
            "the probes' Jobs and pods gone",
        )


# -- the table --------------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


COLUMNS = [  # heading, value, unit, in the target (steady state, not the start's list)
    ("start", lambda r: r.start_s, " s", False),
    ("start CPU", lambda r: r.start_cpu, " s", False),
    ("CPU / resync", lambda r: r.cpu_ms, " ms", True),
    ("requests / resync", lambda r: r.requests, "", True),
    ("reconciles / resync", lambda r: r.reconciles, "", True),
    ("run dirs read / resync", lambda r: r.full, "", True),
    ("RSS", lambda r: r.rss_mib, " MiB", True),
    ("new job -> Job p50", lambda r: pct(r.to_job, 0.5), " s", True),
    ("max", lambda r: max(r.to_job), " s", True),
    ("-> Workload p50", lambda r: pct(r.to_workload, 0.5), " s", True),
]


def table(rows: list[Row]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cells) + " |"

    def ratio(ours: float, base: float, target: bool) -> str:
        if not base:
            return "—" if ours else "1.00"
        text = f"{ours / base:.2f}"
        return f"**{text}**" if target else text

    out = [
        line(["controller", "finished TrainJobs", *(c[0] for c in COLUMNS)]),
        "|---|---:|" + "---:|" * len(COLUMNS),
    ]
    labels = list(dict.fromkeys(r.controller for r in rows))
    for label in labels:
        mine = [r for r in rows if r.controller == label]
        base = mine[0]
        for r in mine:
            values = [f"{f(r):.2f}{unit}" for _, f, unit, _ in COLUMNS]
            out.append(line([label, f"{r.history:,}", *values]))
            if r is not base:
                cells = [ratio(f(r), f(base), t) for _, f, _, t in COLUMNS]
                out.append(line([label, f"{r.history:,} / {base.history:,}", *cells]))
    return "\n".join(out)


def summary(r: Row) -> str:
    kinds = ", ".join(f"{k} {v:g}" for k, v in sorted(r.request_kinds.items()))
    return (
        f"{r.controller}, {r.history:,}: started in {r.start_s:.1f} s ({r.start_cpu:.2f} s CPU); "
        f"per resync {r.cpu_ms:.1f} ms CPU, {r.requests:.1f} requests ({kinds}), "
        f"{r.reconciles:.1f} reconciles; RSS {r.rss_mib:.0f} MiB; new job -> Job "
        f"{pct(r.to_job, 0.5):.2f} s"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--history",
        type=lambda s: sorted({int(x) for x in s.split(",")}),
        default=[0, 100, 1000],
        help="finished TrainJobs at each measurement, comma-separated (the first: baseline)",
    )
    parser.add_argument("--resync", type=float, default=3.0, help="the controller's, seconds")
    parser.add_argument("--resyncs", type=int, default=15, help="idle resyncs measured")
    parser.add_argument("--probes", type=int, default=5, help="new jobs per size")
    parser.add_argument("--threads", type=int, default=8, help="making the history")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs)")
    parser.add_argument(
        "--compare",
        type=Path,
        metavar="CHECKOUT",
        help="also measure another checkout's controller at each size (its root, put first "
        "on the controller's PYTHONPATH), e.g. the main branch's: its rows are 'CHECKOUT'",
    )
    args = parser.parse_args()
    controllers: list[tuple[str, Path | None]] = [("this", None)]
    if args.compare is not None:
        controllers.append((args.compare.name, args.compare.resolve()))
    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-history-"))
    started = time.monotonic()
    cluster: Cluster | None = None
    bench: Bench | None = None
    rows: list[Row] = []
    try:
        cluster = Cluster.start(
            work / "cluster", hgx_nodes=1, cpu_nodes=1, host_mode=True, die_with_parent=True
        )
        bench = Bench(cluster, work, args)
        bench.observer.start()
        for size in args.history:
            took = bench.grow(size)
            if size:
                print(f"{size:,} finished TrainJobs: made in {took:.0f} s", file=sys.stderr)
            for label, source in controllers:
                rows.append(bench.measure(label, source))
                print(summary(rows[-1]), file=sys.stderr, flush=True)
        print(table(rows), flush=True)
        print(
            f"(resync {args.resync:g} s, {args.resyncs} resyncs idle, {args.probes} new jobs "
            f"per size; the whole run: {(time.monotonic() - started) / 60:.1f} min)",
            flush=True,
        )
    finally:
        if bench is not None:
            bench.observer.stop()
            bench.api.close()
        if cluster is not None:
            cluster.stop()
        if args.keep:
            print(f"logs (the controller's, the control plane's): {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
