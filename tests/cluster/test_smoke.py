"""Smoke tests of the test cluster: control plane, Kueue webhooks and admission,
fake HGX nodes, and pods that really run (through kubectl and the Python client)."""

from __future__ import annotations

import json
import os
import textwrap
import time
import uuid

import pytest
from kubernetes import client

from aviflow_testcluster import (
    GPU_RESOURCE,
    GPU_TOLERATION,
    K8S_VERSION,
    LABEL_POOL,
    _procs,
    wait_for,
)

pytestmark = pytest.mark.cluster

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def cluster_queue(name: str, gpus: int = 8) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": "hgx-" + name,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "384"},
                                {"name": "memory", "nominalQuota": "4Ti"},
                                {"name": GPU_RESOURCE, "nominalQuota": str(gpus)},
                            ],
                        }
                    ],
                }
            ],
        },
    }


@pytest.fixture
def gpu_queue(k8s_cluster, k8s_namespace):
    """A ResourceFlavor for the HGX nodes, an 8-GPU ClusterQueue and a LocalQueue."""
    name = f"cq-{uuid.uuid4().hex[:8]}"
    flavor = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "hgx-" + name},
        "spec": {"nodeLabels": {LABEL_POOL: "hgx"}, "tolerations": [GPU_TOLERATION]},
    }
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gpus", "namespace": k8s_namespace},
        "spec": {"clusterQueue": name},
    }
    docs = "\n---\n".join(json.dumps(d) for d in (flavor, cluster_queue(name), local))
    k8s_cluster.kubectl("apply", "-f", "-", input=docs)
    with k8s_cluster.api_client() as api:
        co = client.CustomObjectsApi(api)
        wait_for(
            lambda: any(
                c["type"] == "Active" and c["status"] == "True"
                for c in co.get_cluster_custom_object(
                    "kueue.x-k8s.io", "v1beta2", "clusterqueues", name
                )
                .get("status", {})
                .get("conditions", [])
            ),
            30,
            "ClusterQueue Active",
        )
    yield {"cluster_queue": name, "local_queue": "gpus", "namespace": k8s_namespace}
    k8s_cluster.kubectl(
        "delete", "--wait=false", "--ignore-not-found", "-f", "-", input=docs, check=False
    )


# The rendezvous every multi-node job does: rank 1 finds rank 0 by its stable
# hostname (<job>-0.<headless service>) and talks to a socket rank 0 opened.
RENDEZVOUS = textwrap.dedent("""
    import os, socket, sys, time
    rank = int(os.environ["JOB_COMPLETION_INDEX"])
    peer = os.environ["JOB_NAME"] + "-0." + os.environ["SUBDOMAIN"]
    print("rank", rank, "host", socket.gethostname(), "pod ip", os.environ["POD_IP"], flush=True)
    deadline = time.time() + 60
    while True:
        try:
            addr = socket.gethostbyname(peer)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.2)
    if rank == 0:
        assert addr == os.environ["POD_IP"], (addr, os.environ["POD_IP"])
        srv = socket.create_server((addr, 29500))
        conn, _ = srv.accept()
        msg = conn.recv(100)
        conn.sendall(b"ack:" + msg)
        print("rank 0 got", msg.decode(), flush=True)
    else:
        fqdn = peer + "." + os.environ["NAMESPACE"] + ".svc.cluster.local"
        assert socket.gethostbyname(fqdn) == addr
        while True:
            try:
                c = socket.create_connection((addr, 29500), timeout=2)
                break
            except OSError:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        c.sendall(b"hello from rank 1")
        print("rank 1 got", c.recv(100).decode(), flush=True)
""")


def indexed_job(
    name: str,
    queue: str,
    *,
    pods: int,
    gpus: int,
    script: str,
    volumes: list | None = None,
    mounts: list | None = None,
) -> dict:
    env = [
        {"name": "JOB_NAME", "value": name},
        {"name": "SUBDOMAIN", "value": name},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "completionMode": "Indexed",
            "completions": pods,
            "parallelism": pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "volumes": volumes or [],
                    "containers": [
                        {
                            "name": "trainer",
                            "image": "ignored.example/trainer:latest",
                            "command": ["python", "-c", script],
                            "env": env,
                            "volumeMounts": mounts or [],
                            "resources": {
                                "requests": {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(gpus)},
                                "limits": {GPU_RESOURCE: str(gpus)},
                            },
                        }
                    ],
                },
            },
        },
    }


def headless_service(name: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "clusterIP": "None",
            "selector": {"job-name": name},
            "ports": [{"name": "rdzv", "port": 29500}],
        },
    }


def job_finished(batch: client.BatchV1Api, ns: str, name: str) -> str | None:
    job = batch.read_namespaced_job(name, ns)
    for c in job.status.conditions or []:
        if c.type in ("Complete", "Failed") and c.status == "True":
            return c.type
    return None


# ---------------------------------------------------------------------- tests
def test_control_plane_version_and_nodes(k8s_cluster):
    version = json.loads(k8s_cluster.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"] == K8S_VERSION
    with k8s_cluster.api_client() as api:
        nodes = client.CoreV1Api(api).list_node().items
    hgx = [n for n in nodes if n.metadata.labels.get(LABEL_POOL) == "hgx"]
    cpu = [n for n in nodes if n.metadata.labels.get(LABEL_POOL) == "cpu"]
    assert len(hgx) >= 2 and cpu
    for n in hgx:
        assert n.status.allocatable[GPU_RESOURCE] == "8"
        assert any(t.key == GPU_RESOURCE and t.effect == "NoSchedule" for t in n.spec.taints)
        assert "topology.aviflow.dev/rack" in n.metadata.labels
    for n in nodes:
        ready = [c for c in n.status.conditions if c.type == "Ready"]
        assert ready and ready[0].status == "True"
    leases = json.loads(
        k8s_cluster.kubectl("get", "leases", "-n", "kube-node-lease", "-o", "json").stdout
    )["items"]
    assert {x["metadata"]["name"] for x in leases} >= {n.metadata.name for n in nodes}


def test_kueue_webhook_dry_run(k8s_cluster):
    name = f"dry-{uuid.uuid4().hex[:8]}"
    ok = k8s_cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(cluster_queue(name))
    )
    created = json.loads(ok.stdout)
    # Kueue's mutating webhook defaulted the queue (it adds its finalizer).
    assert "kueue.x-k8s.io/resource-in-use" in created["metadata"].get("finalizers", [])
    bad = cluster_queue(name)
    res = bad["spec"]["resourceGroups"][0]["flavors"][0]["resources"]
    res[0]["name"], res[1]["name"] = res[1]["name"], res[0]["name"]  # names out of order
    rejected = k8s_cluster.kubectl(
        "create", "--dry-run=server", "-f", "-", input=json.dumps(bad), check=False
    )
    assert rejected.returncode != 0
    assert "denied the request" in rejected.stderr, rejected.stderr
    assert "must match the name in coveredResources" in rejected.stderr
    # Nothing was created by the dry runs.
    got = k8s_cluster.kubectl("get", "clusterqueue", name, check=False)
    assert got.returncode != 0


def test_indexed_job_admitted_runs_and_releases_quota(k8s_cluster, gpu_queue):
    ns, lq, cq = gpu_queue["namespace"], gpu_queue["local_queue"], gpu_queue["cluster_queue"]
    name = "train"
    k8s_cluster.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(headless_service(name)))
    job = indexed_job(name, lq, pods=2, gpus=4, script=RENDEZVOUS)
    with k8s_cluster.api_client() as api:
        batch = client.BatchV1Api(api)
        core = client.CoreV1Api(api)
        co = client.CustomObjectsApi(api)
        created = batch.create_namespaced_job(ns, job)
        assert created.spec.suspend is True  # Kueue's webhook suspends queued jobs

        result = wait_for(lambda: job_finished(batch, ns, name), 120, "job to finish")
        pods = core.list_namespaced_pod(ns, label_selector=f"job-name={name}").items
        logs = {p.metadata.name: k8s_cluster.read_logs(ns, p.metadata.name) for p in pods}
        assert result == "Complete", logs
        assert len(pods) == 2
        for p in pods:
            assert p.status.phase == "Succeeded"
            assert p.spec.node_name.startswith("hgx-")
            assert p.status.pod_ip.startswith("127.")
            term = p.status.container_statuses[0].state.terminated
            assert term.exit_code == 0
        by_index = {
            p.metadata.annotations["batch.kubernetes.io/job-completion-index"]: p for p in pods
        }
        assert "rank 0 got hello from rank 1" in logs[by_index["0"].metadata.name]
        assert "rank 1 got ack:hello from rank 1" in logs[by_index["1"].metadata.name]
        # kubectl logs goes through the apiserver to the agent's kubelet endpoint.
        out = k8s_cluster.kubectl("logs", "-n", ns, by_index["1"].metadata.name).stdout
        assert "rank 1 got ack" in out

        workloads = co.list_namespaced_custom_object("kueue.x-k8s.io", "v1beta2", ns, "workloads")[
            "items"
        ]
        assert len(workloads) == 1
        conds = {c["type"]: c["status"] for c in workloads[0]["status"]["conditions"]}
        assert conds.get("Admitted") == "True" and conds.get("Finished") == "True"

        def released():
            st = co.get_cluster_custom_object("kueue.x-k8s.io", "v1beta2", "clusterqueues", cq).get(
                "status", {}
            )
            used = [
                r["total"]
                for f in st.get("flavorsUsage", [])
                for r in f["resources"]
                if r["name"] == GPU_RESOURCE
            ]
            return st.get("admittedWorkloads", 0) == 0 and all(u in ("0", 0) for u in used)

        wait_for(released, 30, "quota to be released")


WAIT_FOR_FILE = textwrap.dedent("""
    import os, time
    while not os.path.exists("/shared/go"):
        time.sleep(0.1)
    print("released", os.environ["JOB_COMPLETION_INDEX"], flush=True)
""")


def test_job_beyond_quota_waits_until_first_completes(k8s_cluster, gpu_queue, tmp_path):
    ns, lq = gpu_queue["namespace"], gpu_queue["local_queue"]
    gate = tmp_path / "gate"
    gate.mkdir()
    vol = [{"name": "shared", "hostPath": {"path": str(gate), "type": "Directory"}}]
    mnt = [{"name": "shared", "mountPath": "/shared"}]
    first = indexed_job("first", lq, pods=2, gpus=4, script=WAIT_FOR_FILE, volumes=vol, mounts=mnt)
    second = indexed_job(
        "second", lq, pods=1, gpus=4, script=WAIT_FOR_FILE, volumes=vol, mounts=mnt
    )
    with k8s_cluster.api_client() as api:
        batch = client.BatchV1Api(api)
        core = client.CoreV1Api(api)
        batch.create_namespaced_job(ns, first)
        wait_for(
            lambda: batch.read_namespaced_job("first", ns).spec.suspend is False,
            30,
            "first job admitted",
        )
        wait_for(
            lambda: (
                len(
                    [
                        p
                        for p in core.list_namespaced_pod(ns, label_selector="job-name=first").items
                        if p.status.phase == "Running"
                    ]
                )
                == 2
            ),
            60,
            "first job's pods running",
        )
        batch.create_namespaced_job(ns, second)
        time.sleep(3)  # give Kueue every chance to (wrongly) admit it
        assert batch.read_namespaced_job("second", ns).spec.suspend is True
        assert not core.list_namespaced_pod(ns, label_selector="job-name=second").items

        (gate / "go").write_text("")
        assert wait_for(lambda: job_finished(batch, ns, "first"), 60, "first job") == "Complete"
        wait_for(
            lambda: batch.read_namespaced_job("second", ns).spec.suspend is False,
            30,
            "second job admitted after the first finished",
        )
        assert wait_for(lambda: job_finished(batch, ns, "second"), 60, "second job") == "Complete"


def test_pod_deletion_kills_processes_after_grace(k8s_cluster, k8s_namespace):
    ns = k8s_namespace
    script = textwrap.dedent("""
        import signal, sys, time, os
        def term(*_):
            print("got SIGTERM", flush=True)
            time.sleep(0.5)
            sys.exit(0)
        signal.signal(signal.SIGTERM, term)
        print("pid", os.getpid(), flush=True)
        while True:
            time.sleep(0.1)
    """)
    pod = cpu_pod("sleeper", script, grace=5)
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, pod)

        def running():
            p = core.read_namespaced_pod("sleeper", ns)
            conds = {c.type: c.status for c in p.status.conditions or []}
            return (
                p.status.phase == "Running"
                and conds.get("Ready") == "True"
                and "pid" in k8s_cluster.read_logs(ns, "sleeper")
            )

        wait_for(running, 60, "pod running")
        pid = int(k8s_cluster.read_logs(ns, "sleeper").split()[1])
        core.delete_namespaced_pod("sleeper", ns)

        wait_for(lambda: pod_gone(core, ns, "sleeper"), 30, "pod object removed")
        assert "got SIGTERM" in k8s_cluster.read_logs(ns, "sleeper")
        assert not os.path.exists(f"/proc/{pid}")


def test_pod_ignoring_sigterm_is_killed_after_grace(k8s_cluster, k8s_namespace):
    ns = k8s_namespace
    script = (
        "import os, signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('pid', os.getpid(), flush=True)\nwhile True: time.sleep(0.1)\n"
    )
    pod = cpu_pod("stubborn", script, grace=2)
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, pod)
        wait_for(lambda: "pid" in _log_or_empty(k8s_cluster, ns, "stubborn"), 60, "pod running")
        pid = int(k8s_cluster.read_logs(ns, "stubborn").split()[1])
        t0 = time.monotonic()
        core.delete_namespaced_pod("stubborn", ns)

        wait_for(lambda: pod_gone(core, ns, "stubborn"), 30, "pod object removed")
        elapsed = time.monotonic() - t0
        assert elapsed >= 1.5, f"killed before the grace period ({elapsed:.1f}s)"
        assert not _procs.alive(pid)


def test_pod_waits_for_a_configmap_created_after_it(k8s_cluster, k8s_namespace, tmp_path):
    """Like the kubelet, the agent retries a volume whose ConfigMap does not exist yet (a new
    namespace gets its ``kube-root-ca.crt`` only some time after its ServiceAccount)."""
    ns, mnt = k8s_namespace, tmp_path / "config"
    pod = cpu_pod(
        "late",
        f"print(open({str(mnt / 'greeting')!r}).read(), flush=True)\n"
        "import time\ntime.sleep(600)\n",
        grace=1,
    )
    pod["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "late-config"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "cfg", "mountPath": str(mnt)}]
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespaced_pod(ns, pod)

        def waiting():
            p = core.read_namespaced_pod("late", ns)
            st = p.status.container_statuses or []
            why = st and st[0].state.waiting
            return why and why.message and (p.status.phase, why)

        phase, why = wait_for(waiting, 60, "the container to wait for its volume")
        assert phase == "Pending"
        assert why.reason == "ContainerCreating"
        assert why.message == 'MountVolume.SetUp failed: configmap "late-config" not found'
        assert _log_or_empty(k8s_cluster, ns, "late") == ""

        core.create_namespaced_config_map(
            ns, {"metadata": {"name": "late-config"}, "data": {"greeting": "hello, late"}}
        )
        wait_for(lambda: "hello, late" in _log_or_empty(k8s_cluster, ns, "late"), 60, "the pod")
        p = core.read_namespaced_pod("late", ns)
        assert p.status.phase == "Running"
        assert p.status.container_statuses[0].restart_count == 0
        core.delete_namespaced_pod("late", ns)
        wait_for(lambda: pod_gone(core, ns, "late"), 30, "pod object removed")


def cpu_pod(name: str, script: str, grace: int) -> dict:
    """A bare pod on a CPU node running ``python -c script``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {LABEL_POOL: "cpu"},
            "terminationGracePeriodSeconds": grace,
            "containers": [
                {"name": "main", "image": "ignored", "command": ["python", "-c", script]}
            ],
        },
    }


def pod_gone(core: client.CoreV1Api, ns: str, name: str) -> bool:
    try:
        core.read_namespaced_pod(name, ns)
        return False
    except client.ApiException as e:
        return e.status == 404


def _log_or_empty(cluster, ns: str, pod: str) -> str:
    try:
        return cluster.read_logs(ns, pod)
    except (OSError, ValueError):
        return ""
