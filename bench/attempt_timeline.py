"""Where a replayed job's seconds go on the test control plane: one queue, jobs that wait
behind each other, each attempt's steps timed from watches (issue 26).

``bench/replay.py`` compresses a trace hour into 6 s, so a second that Kubernetes or Kueue
takes per attempt is ten trace minutes. This measures those seconds: ``--jobs`` TrainJobs of
8 GPUs (one fake HGX node, a ClusterQueue of 8), submitted ``--gap`` s apart so that each
waits for the one before, each pod the replay's stand-in holding its GPUs ``--hold`` s from
its admission (``bench/_replay_hold.py``), run by the controller as the replay runs it.
Watches in this process (its clock; the API server's condition times have whole seconds)
see each job's Workload, attempt Job and pod, and each step is timed per job:

- ``submit -> admitted``: the client's create to its Workload ``Admitted`` (the controller
  makes the Job, Kueue the Workload; only the first job, the others wait);
- ``admitted -> pod created``: Kueue unsuspends the Job, the Job controller makes its pod;
- ``pod created -> bound``: Kueue's topology-aware scheduling gates the pod until its
  ungater removes the gate (it batches pod events for a second), then the scheduler binds;
- ``bound -> running``: the node agent starts the process;
- ``pod exited -> Job complete``: the node agent's report of the exit (it polls its
  processes every 0.2 s) to the Job's ``Complete`` (the Job controller batches pod updates
  for a second);
- ``Job complete -> Workload finished``: Kueue frees the quota;
- ``finished -> next admitted``: the next waiting Workload admitted after the quota the one
  before freed (Kueue requeues inadmissible Workloads in batches of a second).

Prints each step's median and maximum over the jobs. One run of eight jobs (6 December
2026, idle machine; 59 s): the ungate took 1.00-1.04 s every time, the requeue 1.03-1.05 s,
the Job's completion 0.1-1 s, the rest under 0.2 s (README).

    .venv/bin/python bench/attempt_timeline.py [--jobs 6] [--hold 3] [--gap 0.3]

Builds the test control plane on first use (see tests/cluster/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (the test tree's helpers: tests/cluster, k8s, images)
from _replay_hold import stand_in
from _replay_stats import percentile
from aviflow_pool import install_crd, pool_objects, run_store_volume
from controller_history import ControllerProcess
from kubernetes import client, watch

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION
from aviflow.k8s.settings import ClusterSettings
from aviflow.spec import TrainJob
from aviflow_testcluster import Cluster, wait_for

HERE = Path(__file__).resolve().parent
# (step, from mark, to mark): marks are per job, "next admitted" the following job's
STEPS = [
    ("submit -> admitted", "submitted", "admitted"),
    ("admitted -> pod created", "admitted", "pod created"),
    ("pod created -> bound", "pod created", "bound"),
    ("bound -> running", "bound", "running"),
    ("pod exited -> Job complete", "exited", "complete"),
    ("Job complete -> Workload finished", "complete", "finished"),
    ("finished -> next admitted", "finished", "next admitted"),
]
Marks = Mapping[str, Mapping[str, float]]  # job -> mark -> first time seen


def steps(marks: Marks) -> dict[str, list[float]]:
    """Each step's seconds per job. Jobs are taken in the order Kueue admitted them (jobs
    created in the same second have no order of their own: its order among them is not
    submission's); each waited for the one before, so only the first one's ``submit ->
    admitted`` is the queue's own, and each one's ``finished -> next admitted`` ends at the
    next one's admission.

    >>> marks = {"a": {"submitted": 0.0, "admitted": 0.2, "pod created": 0.3, "bound": 1.3,
    ...                "running": 1.4, "exited": 4.0, "complete": 4.6, "finished": 4.7},
    ...          "b": {"submitted": 0.5, "admitted": 5.7}}
    >>> got = steps(marks)
    >>> got["submit -> admitted"], got["pod created -> bound"], got["finished -> next admitted"]
    ([0.2], [1.0], [1.0])
    """
    found: dict[str, list[float]] = {name: [] for name, _, _ in STEPS}
    order = sorted((m["admitted"], job) for job, m in marks.items() if "admitted" in m)
    for i, (_, job) in enumerate(order):
        m = dict(marks[job])
        if i + 1 < len(order):
            m["next admitted"] = order[i + 1][0]
        for name, a, b in STEPS:
            if name == "submit -> admitted" and i > 0:
                continue  # it waited for the job before
            if a in m and b in m:
                found[name].append(round(m[b] - m[a], 6))
    return found


def table(found: Mapping[str, list[float]]) -> str:
    """The steps' medians and maxima, a Markdown table.

    >>> print(table({"bound -> running": [0.05, 0.1, 0.07], "submit -> admitted": []}))
    | step | jobs | p50 s | max s |
    |---|---:|---:|---:|
    | bound -> running | 3 | 0.07 | 0.10 |
    | submit -> admitted | 0 | - | - |
    """
    lines = ["| step | jobs | p50 s | max s |", "|---|---:|---:|---:|"]
    for name, values in found.items():
        cells = f"{percentile(values, 0.5):.2f} | {max(values):.2f}" if values else "- | -"
        lines.append(f"| {name} | {len(values)} | {cells} |")
    return "\n".join(lines)


class Marker:
    """Watches one namespace's Workloads, Jobs and pods; the first time each job reaches a
    mark, by this process's clock. A job is its TrainJob's name (its attempt Job's name
    and its pod's start with it)."""

    def __init__(self, api: client.ApiClient, ns: str, names: Iterable[str]) -> None:
        self.names = list(names)
        self.marks: dict[str, dict[str, float]] = {n: {} for n in self.names}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        custom = client.CustomObjectsApi(api)
        self._lists: list[tuple[Callable[..., Any], dict[str, Any], Callable[[Any], None]]] = [
            (core.list_namespaced_pod, {"namespace": ns}, self._pod),
            (batch.list_namespaced_job, {"namespace": ns}, self._job),
            (custom.list_namespaced_custom_object,
             {"group": KUEUE_GROUP, "version": KUEUE_VERSION, "namespace": ns,
              "plural": "workloads"}, self._workload),
        ]  # fmt: skip

    def mark(self, name: str, what: str, at: float | None = None) -> None:
        job = next((n for n in self.names if name.startswith(n + "-") or name == n), None)
        if job is None:
            return
        with self._lock:
            self.marks[job].setdefault(what, time.time() if at is None else at)

    def _pod(self, pod: Any) -> None:
        name = pod.metadata.name
        self.mark(name, "pod created")
        if pod.spec.node_name:
            self.mark(name, "bound")
        if pod.status.phase in ("Running", "Succeeded"):
            self.mark(name, "running")
        for c in pod.status.container_statuses or []:
            if c.state.terminated is not None:
                self.mark(name, "exited")

    def _job(self, job: Any) -> None:
        if any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or []):
            self.mark(job.metadata.name, "complete")

    def _workload(self, wl: dict[str, Any]) -> None:
        owners = wl["metadata"].get("ownerReferences") or [{}]
        name = owners[0].get("name", "")
        for c in (wl.get("status") or {}).get("conditions") or []:
            if c["status"] == "True" and c["type"] in ("Admitted", "Finished"):
                self.mark(name, c["type"].lower())

    def _watch(self, list_fn: Callable[..., Any], kw: dict[str, Any], on: Any) -> None:
        while not self._stop.is_set():
            try:
                for ev in watch.Watch().stream(list_fn, timeout_seconds=30, **kw):
                    on(ev["object"])
                    if self._stop.is_set():
                        return
            except Exception:  # the watch broke (the cluster stopping): start it again
                time.sleep(0.2)

    def snapshot(self) -> dict[str, dict[str, float]]:
        with self._lock:
            return {n: dict(m) for n, m in self.marks.items()}

    def start(self) -> None:
        for list_fn, kw, on in self._lists:
            threading.Thread(target=self._watch, args=(list_fn, kw, on), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()


def run(args: argparse.Namespace) -> dict[str, list[float]]:
    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-timeline-"))
    cluster = Cluster.start(work / "cluster", host_mode=True, hgx_nodes=1)
    ctl = None
    marker = None
    try:
        install_crd(cluster)
        ns = cluster.create_namespace()
        runs = work / "runs"
        runs.mkdir()
        objects = pool_objects("tl", ns, {"team-a": {"gpus": 8}})
        objects += run_store_volume(ns, str(runs), "tl-runs")
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
        raw = stand_in(work, ns, runs, sys.executable, cluster.kubectl_path, cluster.kubeconfig)
        api = cluster.api_client()
        backend = KubernetesBackend(ClusterSettings.from_dict(raw), api=api)
        os.environ["BENCH_QUEUED_TICK"] = "1"
        ctl = ControllerProcess(
            work, cluster.kubeconfig, 30.0, script=HERE / "_replay_controller.py"
        )
        names = [f"tl{i}" for i in range(args.jobs)]
        marker = Marker(api, ns, names)
        marker.start()
        time.sleep(1.0)  # the watches listed
        for name in names:
            spec = TrainJob.from_dict({"metadata": {"name": name}, "spec": {
                "queue": "team-a", "nodes": 1, "gpusPerNode": 8, "command": ["true"],
                "maxRestarts": 0, "timeLimit": f"{args.hold + 60:.0f}s",
                "env": {"BENCH_HOLD": str(args.hold)},
            }})  # fmt: skip
            marker.mark(name, "submitted")
            backend.submit(spec, build_bundle(spec))
            time.sleep(args.gap)
        watching = marker  # not None, for the closure

        def done() -> bool:
            return all("finished" in m for m in watching.snapshot().values())

        wait_for(done, args.jobs * (args.hold + 10) + 60, "every job finished", interval=0.5)
        return steps(marker.snapshot())
    finally:
        if marker is not None:
            marker.stop()
        if ctl is not None:
            ctl.stop()
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=6, help="jobs, one after another")
    parser.add_argument("--hold", type=int, default=3, help="seconds each holds its GPUs")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between submissions")
    args = parser.parse_args()
    if args.jobs < 2 or args.hold < 1:
        parser.error("--jobs must be at least 2 and --hold at least 1")
    t0 = time.monotonic()
    print(table(run(args)))
    print(f"(the whole run: {time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
