"""CPU per object created on the test control plane, by process: what each of the objects a
submission makes costs the API server, Kueue, etcd and the controller-manager (read from
``/proc`` over ``n`` creates, four at once, and the 2 s after them), and this process (the
client). ``bench/admission.py`` prints it before its scenarios, with no controller running:
a TrainJob adds its own create, a NetworkPolicy's and a status patch to what a plain Job
costs, and a burst that saturates the machine's cores waits on that CPU.
``.venv/bin/python bench/_object_costs.py`` prints it alone, on a control plane of its own
(~1 min)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import _paths  # noqa: F401  (the test tree's helpers: tests/cluster)
from kubernetes import client

from aviflow.k8s import manifests as m
from aviflow.k8s.crd import GROUP, PLURAL, VERSION, committed
from aviflow.k8s.kueue import KUEUE_GROUP, KUEUE_VERSION
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import JobState, JobStatus
from aviflow.spec import TrainJob
from aviflow_testcluster import Cluster, wait_for

LABEL = "aviflow.dev/bench-cost"  # on every object made here, which goes after
PROCESSES = ("kube-apiserver", "kueue", "etcd", "kube-controller-manager")
WARM = 10


def _cpu() -> dict[tuple[int, str], float]:
    """Seconds of CPU per live process: (pid, program name)."""
    tick, out = os.sysconf("SC_CLK_TCK"), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
            with open(f"/proc/{pid}/cmdline") as f:
                program = os.path.basename(f.read().split("\0")[0])
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        out[(int(pid), program)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _per_object(make: Callable[[int], None], n: int) -> dict[str, float]:
    """Milliseconds of CPU per call of ``make`` in each of :data:`PROCESSES` and in this one."""
    time.sleep(2)  # the last calls' watchers and controllers are done
    before = _cpu()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(make, range(n)))
    time.sleep(2)  # the watchers' and controllers' share
    spent: dict[str, float] = {}
    for (pid, program), seconds in _cpu().items():
        name = "client" if pid == os.getpid() else program
        spent[name] = spent.get(name, 0.0) + seconds - before.get((pid, program), 0.0)
    return {name: spent.get(name, 0.0) * 1000 / n for name in (*PROCESSES, "client")}


def object_costs(
    api: client.ApiClient, ns: str, settings: ClusterSettings, job: TrainJob, n: int = 60
) -> str:
    """The table (Markdown): ms of CPU per object, by process; the objects are deleted after."""
    batch, net = client.BatchV1Api(api), client.NetworkingV1Api(api)
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    mark = {LABEL: "1"}

    def ref(name: str) -> m.JobRef:
        return m.JobRef(name, "", "bench")

    def trainjob(i: int) -> None:
        body = m.trainjob(job, ref(f"cost-tj-{i}"), "bench", settings)
        body["metadata"].setdefault("labels", {}).update(mark)
        custom.create_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, body, _preload_content=False
        )

    def status(i: int) -> None:
        wire = JobStatus(JobState.QUEUED, 0, "", time.time()).to_dict()
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, ns, PLURAL, f"cost-tj-{i}", {"status": wire}, _preload_content=False
        )

    def policy(i: int) -> None:
        body = m.network_policy(ref(f"cost-np-{i}"), settings)
        del body["metadata"]["ownerReferences"]
        body["metadata"]["labels"].update(mark)
        net.create_namespaced_network_policy(ns, body, _preload_content=False)

    def plain(i: int) -> None:
        body = m.attempt_job(job, ref(f"cost-job-{i}"), 1, settings)
        del body["metadata"]["ownerReferences"]
        body["metadata"]["labels"].update({**mark, m.QUEUE_LABEL: "no-such-queue"})
        batch.create_namespaced_job(ns, body, _preload_content=False)

    def config_map(i: int) -> None:
        body = {"metadata": {"name": f"cost-cm-{i}", "labels": mark}, "data": {"a": "b"}}
        core.create_namespaced_config_map(ns, body, _preload_content=False)

    kinds: list[tuple[str, Callable[[int], None]]] = [
        ("TrainJob", trainjob),
        ("TrainJob status patch", status),
        ("NetworkPolicy", policy),
        ("ConfigMap (for scale)", config_map),
        ("Job (its Workload waits: no such queue)", plain),  # last: Kueue retries it after
    ]
    for _, make in kinds:  # warm (connections, caches), not counted: the first n of each
        with ThreadPoolExecutor(4) as pool:
            list(pool.map(make, range(n, n + WARM)))
    rows = [(what, _per_object(make, n)) for what, make in kinds]
    selector = f"{LABEL}=1"
    custom.delete_collection_namespaced_custom_object(
        GROUP, VERSION, ns, PLURAL, label_selector=selector
    )
    net.delete_collection_namespaced_network_policy(ns, label_selector=selector)
    batch.delete_collection_namespaced_job(
        ns, label_selector=selector, propagation_policy="Background"
    )
    core.delete_collection_namespaced_config_map(ns, label_selector=selector)

    def gone() -> bool:  # the Jobs, and the Workloads the garbage collector takes after them
        jobs = batch.list_namespaced_job(ns, label_selector=selector).items
        workloads = custom.list_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, ns, "workloads"
        )["items"]
        return not jobs and not workloads

    wait_for(gone, 300, "the measured objects deleted", interval=0.5)
    time.sleep(2)
    heads = [*PROCESSES, "client"]
    out = [
        f"| ms of CPU per object ({n}, 4 at once) | " + " | ".join(heads) + " |",
        "|---|" + "---:|" * len(heads),
    ]
    for what, ms in rows:
        out.append(f"| {what} | " + " | ".join(f"{ms[h]:.1f}" for h in heads) + " |")
    return "\n".join(out)


def main() -> None:
    """The table alone, on a test control plane of its own (no queues: the Jobs wait)."""
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    work = Path(tempfile.mkdtemp(prefix="aviflow-bench-costs-"))
    cluster = Cluster.start(work / "cluster", host_mode=True)
    try:
        cluster.kubectl("apply", "--server-side", "-f", "-", input=committed())
        cluster.kubectl("wait", "--for=condition=Established", f"crd/{PLURAL}.{GROUP}")
        ns = cluster.create_namespace()
        settings = ClusterSettings.from_dict(
            {
                "namespace": ns,
                "python": sys.executable,
                "image": "aviflow/trainer:bench",
                "runs": {"localPath": str(work)},
            }
        )
        job = TrainJob.from_dict({"metadata": {"name": "c"}, "spec": {"command": ["true"]}})
        print(object_costs(cluster.api_client(), ns, settings, job), flush=True)
    finally:
        cluster.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
