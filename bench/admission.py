"""Admission overhead of TrainJobs on the test control plane, against plain Kueue Jobs.

A burst of N small jobs (1 node x 1 GPU, a command that exits at once) across 4 team
queues (8 GPUs each, 32 in all on the 4 fake HGX nodes):

1. baseline: each job's attempt Job (the same builder, the same pods running the same
   runtime), written to the run store and created directly with its Kueue labels;
2. TrainJobs, through the controller (``aviflow.operator``, 4 workers, in this process).

For each: creation -> admitted (the Workload's ``Admitted`` condition) and creation ->
running (the first pod's ``Ready`` condition), p50 and p99, and admissions per second over
the burst; then the ratios TrainJob / baseline (target: p99 overhead <= 1.2x). Also
submit -> first training step of a 2 x 2 job on the cluster vs the local backend.

    .venv/bin/python bench/admission.py [--jobs 200]

Builds the test control plane on first use (see tests/cluster/README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (the test tree's helpers: tests/cluster, k8s, images)
from aviflow_pool import pool_objects, run_store_volume
from kubernetes import client

import aviflow
from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.k8s import manifests as m
from aviflow.k8s.crd import committed
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator import Controller
from aviflow.spec import TrainJob
from aviflow.store import RunStore
from aviflow_testcluster import Cluster, wait_for

ROOT = Path(__file__).resolve().parent.parent
TEAMS = [f"team-{i}" for i in range(4)]


def _t(text: str | None) -> float | None:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() if text else None


def _cond(obj: dict[str, Any], kind: str) -> float | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return _t(c.get("lastTransitionTime"))
    return None


def plain_job(job: TrainJob, store: RunStore, settings: ClusterSettings) -> dict[str, Any]:
    """The attempt Job a TrainJob's controller would create, written to the run store and
    rendered by the same builder, without the TrainJob (no owner): what Kueue alone costs."""
    bundle = build_bundle(job)
    run = store.create(job, bundle.store_files(), "bench", backend="kubernetes")
    body = m.attempt_job(job, m.JobRef(run.id, "", run.path.parent.name), 1, settings)
    del body["metadata"]["ownerReferences"]
    body["metadata"]["labels"]["bench"] = "plain"
    return body


def measure(
    api: client.ApiClient, ns: str, created: dict[str, float], owner_of: dict[str, str]
) -> tuple[list[float], list[float]]:
    """(creation -> admitted, creation -> running) per job; ``owner_of`` maps a Job name to
    the burst item it belongs to."""
    co, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    admitted: dict[str, float] = {}
    running: dict[str, float] = {}

    def done() -> bool:
        for wl in co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "workloads")[
            "items"
        ]:
            for ref in wl["metadata"].get("ownerReferences") or []:
                item = owner_of.get(ref.get("name", ""))
                t = _cond(wl, "Admitted")
                if item and t and item not in admitted:
                    admitted[item] = t
        for pod in core.list_namespaced_pod(ns).items:
            item = owner_of.get((pod.metadata.labels or {}).get("job-name", ""))
            if item and item not in running:
                for c in pod.status.conditions or []:
                    if (c.type == "Ready" and c.status == "True") or (
                        c.type == "ContainersReady" and c.status == "True"
                    ):
                        running[item] = c.last_transition_time.timestamp()
                        break
                else:
                    if pod.status.phase in ("Running", "Succeeded") and pod.status.start_time:
                        term = [
                            s.state.terminated
                            for s in pod.status.container_statuses or []
                            if s.state.terminated
                        ]
                        if term and term[0].started_at:
                            running[item] = term[0].started_at.timestamp()
        return len(admitted) == len(created) and len(running) == len(created)

    wait_for(done, 1800, "every job admitted and running", interval=2.0)
    return [admitted[k] - created[k] for k in created], [running[k] - created[k] for k in created]


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(q * (len(values) - 1)))]


def report(name: str, adm: list[float], run: list[float], span: float) -> dict[str, float]:
    out = {
        "admit_p50": pct(adm, 0.5), "admit_p99": pct(adm, 0.99),
        "run_p50": pct(run, 0.5), "run_p99": pct(run, 0.99),
        "admissions_per_s": len(adm) / span if span > 0 else float("inf"),
    }  # fmt: skip
    print(f"{name:10s} " + "  ".join(f"{k} {v:7.2f}" for k, v in out.items()), flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    ns_args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-admission-"))
    cluster = Cluster.start(work / "cluster", host_mode=True)
    try:
        cluster.kubectl("apply", "--server-side", "-f", "-", input=committed())
        cluster.kubectl("wait", "--for=condition=Established", "crd/trainjobs.aviflow.dev")
        ns = cluster.create_namespace()
        runs = work / "runs"
        runs.mkdir()
        prefix = f"b{uuid.uuid4().hex[:6]}"
        objects = pool_objects(prefix, ns, {t: {"gpus": 8} for t in TEAMS}) + run_store_volume(
            ns, str(runs), f"{prefix}-runs"
        )
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
        time.sleep(5)  # ClusterQueues become active
        api = cluster.api_client()
        batch = client.BatchV1Api(api)

        settings = ClusterSettings.from_dict(
            {"namespace": ns, "python": sys.executable, "runs": {"localPath": str(runs)}}
        )
        store = RunStore(runs)

        def burst(kind: str) -> list[TrainJob]:
            return [
                TrainJob.from_dict(
                    {
                        "metadata": {"name": f"{kind}-{i:04d}"},
                        "spec": {"queue": TEAMS[i % 4], "command": ["true"]},
                    }
                )
                for i in range(ns_args.jobs)
            ]

        # 1. the same attempt Jobs, created directly with their Kueue labels
        created: dict[str, float] = {}
        names: dict[str, str] = {}

        def create_plain(job: TrainJob) -> None:
            t = time.time()
            body = plain_job(job, store, settings)
            batch.create_namespaced_job(ns, body)
            created[body["metadata"]["name"]] = t
            names[body["metadata"]["name"]] = body["metadata"]["name"]

        start = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(create_plain, burst("plain")))
        adm, run = measure(api, ns, created, names)
        base = report("plain Job", adm, run, max(start + a for a in adm) - start)
        cluster.kubectl("delete", "jobs", "-l", "bench=plain", "-n", ns, "--wait=true")

        # 2. TrainJobs through the controller
        controller = Controller(api, settings, store, workers=4)
        controller.start()
        backend = KubernetesBackend(settings, api=api)
        jobs = burst("tj")
        created = {}
        ids: dict[str, str] = {}

        def submit(job: TrainJob) -> None:
            t = time.time()
            job_id = backend.submit(job, build_bundle(job))
            created[job_id] = t
            ids[f"{job_id}-a1"] = job_id

        start = time.time()
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(submit, jobs))
        adm, run = measure(api, ns, created, ids)
        ours = report("TrainJob", adm, run, max(start + a for a in adm) - start)
        print(
            "ratios (TrainJob / plain Job): "
            + "  ".join(
                f"{k} {ours[k] / base[k]:.2f}"
                for k in ("admit_p50", "admit_p99", "run_p50", "run_p99")
            )
            + f"  admissions/s {ours['admissions_per_s'] / base['admissions_per_s']:.2f}"
            + "  (target: p99 <= 1.2)",
            flush=True,
        )

        # 3. submit -> first step of a 2 x 2 job, cluster vs local
        first_step(backend, LocalBackend(root=work / "local"))
        controller.stop()
    finally:
        cluster.stop()
    return 0


def first_step(cluster_backend: KubernetesBackend, local: LocalBackend) -> None:
    tiny = (ROOT / "aviflow" / "examples" / "tiny_regression.py").read_text()
    spec = {
        "metadata": {"name": "first-step"},
        "spec": {
            "nodes": 2,
            "gpusPerNode": 2,
            "queue": TEAMS[0],
            "script": tiny,
            "env": {"TINY_STEPS": "5"},
        },
    }
    times = {}
    for name, backend in (("local", local), ("cluster", cluster_backend)):
        t = time.time()
        job = aviflow.submit(spec, backend)
        wait_for(lambda job=job: job.metric_rows(), 600, f"the first step ({name})", interval=0.1)
        times[name] = time.time() - t
        job.wait(timeout=600)
    print(
        f"submit -> first step, 2 x 2: local {times['local']:.1f}s  cluster {times['cluster']:.1f}s  "
        f"ratio {times['cluster'] / times['local']:.2f}",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
