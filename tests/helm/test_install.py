"""The chart on a test control plane of its own (not in host mode: pods run in the built
images or not at all): every rendered object passes the API server's own validation, and
``helm install`` / ``upgrade`` / ``rollback`` / ``uninstall`` behave for real.

After ``helm install``, the controller runs as a pod in the trainer image with its own
least-privilege identity (in-cluster config); a TrainJob that a team member applies with
kubectl waits for quota, and ``helm upgrade`` raising the team's GPU quota is all it takes
for Kueue to admit it and for it to train to the end. The queue-access policy refuses
another team's member. ``helm rollback`` restores the quota; ``helm uninstall`` leaves only
what is documented to stay (the TrainJob CRD and the run store's claim).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml
from aviflow_images import own_cluster, trainer_images_entry
from aviflow_kernel import execute, run_in_kernel, start_kernel
from aviflow_pool import hostpath_storage

from aviflow.store import DATA_DIR, RunDir
from aviflow_testcluster import RESTRICTED, Cluster
from aviflow_testcluster._certs import server_certificate

from .chart_actors import (
    TINY,
    User,
    answers,
    explain,
    hostile_steers_nothing,
    kubectl_json,
    kubectl_users_held_to_their_team,
    spawn_page,
    submit_hostile,
    until,
)
from .conftest import CHART, EXAMPLES, Render

pytestmark = [pytest.mark.cluster, pytest.mark.images, pytest.mark.timeout(1800)]

PASSWORD = "chart-test-password"


@pytest.fixture(scope="module")
def chart_cluster(
    bundles: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A cluster of its own: the chart's cluster-scoped objects (the CRD, the policy, Kueue's
    flavors) must not meet those other tests apply to the session's cluster. The images are
    unpacked first (``bundles``), as a pre-puller would: a first unpack of the 6 GB notebook
    image on a busy 2-core machine can take minutes, which is not what the test measures."""
    with own_cluster(tmp_path_factory.mktemp("chart-cluster"), hgx_nodes=2) as cluster:
        yield cluster


def helm_run(
    helm: Path, cluster: Cluster, home: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(cluster.kubeconfig),
        # Helm's own cache, config and data: the test's, not the machine's
        **{f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")},
    }
    return subprocess.run([str(helm), *args], capture_output=True, text=True, env=env, timeout=600)


def test_every_rendered_object_passes_a_server_side_dry_run(
    chart_cluster: Cluster, render: Render
) -> None:
    chart_cluster.create_namespace("aviflow")
    made = {"aviflow"}
    for case in ([], [EXAMPLES / "multi-team.yaml"]):
        docs = render(*case)
        # the users' namespaces are created for real first: a dry run persists nothing, so
        # the objects in them would find none
        for d in docs:
            name = d["metadata"]["name"]
            if d["kind"] == "Namespace" and name not in made:
                chart_cluster.create_namespace(name, labels=d["metadata"]["labels"])
                made.add(name)
        done = chart_cluster.kubectl(
            "apply",
            "--dry-run=server",
            "--server-side",
            "-f",
            "-",
            input="\n---\n".join(json.dumps(d) for d in docs),
            check=False,
        )
        assert done.returncode == 0, done.stderr
        lines = done.stdout.strip().splitlines()
        assert len(lines) == len(docs) and all("(server dry run)" in line for line in lines), lines


CELL = f"""
%load_ext aviflow
for name, steps in (("holds-quota", 100000), ("from-notebook", 10)):
    get_ipython().run_cell_magic(
        "aviflow_train",
        f"--nodes 2 --gpus-per-node 1 --name {{name}} --env TINY_STEPS={{steps}} "
        "--env TINY_STEP_SLEEP=0.5 --out job",
        {TINY!r},
    )
    print(name, job.id)
import os
print("backend", type(job.backend).__name__, os.environ["AVIFLOW_API_URL"])
print("queue", job.spec.spec.queue)
"""


def test_install_upgrade_rollback_uninstall(
    chart_cluster: Cluster,
    helm: Path,
    built_images: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    """The whole admin and user path on an installed release: the hub, aviflow-api and the
    controller run as pods in the built images; a user logs in at the proxy's address,
    spawns a KubeSpawner notebook on a CPU node and submits a cell from it, which waits for
    its team's quota; ``helm upgrade`` raising the quota is all it takes for it to train to
    the end on the HGX nodes, and the profile changed in the same upgrade reaches the next
    spawn. The upgrade and a rollout restart of the hub keep her notebook pod, a variable in
    its live kernel and its route (the proxy runs apart). A kubectl TrainJob of another team's member is refused by the queue policy.
    ``helm rollback`` restores quota and profile; ``helm uninstall`` leaves only what is
    documented to stay."""
    cluster = chart_cluster
    t0 = time.monotonic()

    def step(what: str) -> None:  # where the time goes, in the report of a failure
        print(f"[{time.monotonic() - t0:6.1f} s] {what}", file=sys.stderr, flush=True)

    # every pod of the release (hub, aviflow-api, controller) passes Pod Security's
    # `restricted` profile, which the namespace enforces; the chart makes the notebooks' and
    # each team's namespace, which enforce it too
    ns = cluster.create_namespace("chart", labels=RESTRICTED)
    release = f"av{uuid.uuid4().hex[:6]}"
    nb_ns, vision_ns, nlp_ns = (f"{release}-{k}" for k in ("notebooks", "vision", "nlp"))
    trainer, hub_image, notebook = (built_images[k] for k in ("trainer", "hub", "notebook"))
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, 1000, 1000)  # as a provisioner's volume for pods of uid 1000 would be
    storage = f"{ns}-state"
    # the claims of the hub's database, aviflow-api's ledger and alice's home bind to these
    volumes = hostpath_storage(storage, [tmp_path / "pv" / k for k in ("hub", "api", "home")])
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in volumes))

    def image(ref: str) -> dict[str, str]:
        repository, tag = ref.rsplit(":", 1)
        return {"repository": repository, "tag": tag}

    def values(gpus: int, cpu: int, https: str | None = None) -> Path:
        path = tmp_path / f"values-{gpus}-{https}.yaml"
        proxy: dict[str, Any] = {"port": 8080}
        if https:
            proxy["https"] = {"enabled": True, "secret": https}
        profile = {
            "slug": "small",
            "displayName": f"Small ({cpu} CPU)",
            "cpu": cpu,
            "memory": "1Gi",
            "image": notebook["image"],
            "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
            "default": True,
        }
        path.write_text(
            yaml.safe_dump(
                {
                    "hub": {
                        "groups": {"vision": ["alice"], "nlp": ["bob"]},
                        "startTimeout": 600,
                    },
                    # a test cluster's load balancer: a loopback address of this machine
                    "auth": {
                        "type": "dev",
                        "dev": {"userPassword": PASSWORD, "allowOnPublicAddress": True},
                    },
                    "teams": [
                        {
                            "name": "vision",
                            "groups": ["vision"],
                            "queue": "vision",
                            "gpuQuota": gpus,
                        },
                        {"name": "nlp", "groups": ["nlp"], "queue": "nlp", "gpuQuota": 2},
                    ],
                    "profiles": [profile],
                    "storage": {"capacity": "1Gi", "storageClass": storage},
                    "api": {"kubernetes": {"images": [trainer_images_entry(trainer)]}},
                    "images": {
                        "hub": image(hub_image["image"]),
                        "controller": image(trainer["image"]),
                    },
                    "proxy": proxy,
                    "state": {"storageClass": storage},
                    # one volume: the chart binds a PersistentVolume on it to a claim in the
                    # release's namespace and in each team's
                    "runStore": {"volume": {"hostPath": {"path": str(runs)}}},
                    "kubectlAccess": {"enabled": True},
                }
            )
        )
        return path

    home = tmp_path / "helm-home"
    done = helm_run(
        helm, cluster, home, "install", release, str(CHART), "-n", ns, "-f", str(values(2, 1)),
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr + explain(cluster, ns)

    def pods_of(component: str) -> list[dict[str, Any]]:
        return list(
            kubectl_json(
                cluster, "get", "pods", "-n", ns, "-l", f"app.kubernetes.io/component={component}"
            )["items"]
        )

    def pod_of(component: str) -> dict[str, Any]:
        [pod] = pods_of(component)
        return pod

    step("each part runs in its image, under its own service account")
    # each part runs in its image, under its own service account
    for component, sa, digest, replicas in (
        ("hub", f"{release}-hub", hub_image["digest"], 1),
        ("proxy", f"{release}-proxy", hub_image["digest"], 1),
        ("api", f"{release}-api", hub_image["digest"], 1),
        ("controller", f"{release}-controller", trainer["digest"], 2),
    ):
        pods = pods_of(component)
        assert len(pods) == replicas, component
        for pod in pods:
            assert pod["spec"]["serviceAccountName"] == sa
            assert pod["status"]["containerStatuses"][0]["imageID"] == digest, component
    # one of the two controllers leads, on the release's Lease
    controllers = {p["metadata"]["name"] for p in pods_of("controller")}

    def lease_holder() -> str | None:
        got = cluster.kubectl(
            "get", "lease", f"{release}-controller", "-n", ns, "--ignore-not-found",
            "-o", "jsonpath={.spec.holderIdentity}",
        )  # fmt: skip
        return got.stdout.strip() or None

    holder = until(cluster, ns, lease_holder, 120, "a controller leads")
    assert holder.rsplit("_", 1)[0] in controllers, (holder, controllers)
    for pod in pods_of("controller"):  # each live, at its pod's IP (the probes')
        # the test control plane's agent runs no probes (a pod is Ready once its process
        # runs): wait for the process to serve, as a readiness probe would
        healthz = f"http://{pod['status']['podIP']}:8090/healthz"
        until(cluster, ns, lambda u=healthz: answers(u), 120, f"{pod['metadata']['name']} serves")
        got = requests.get(healthz, timeout=30)
        assert (got.status_code, got.text) == (200, "ok\n"), pod["metadata"]["name"]

    step("the user's address: the proxy's LoadBalancer Service")
    # the user's address: the proxy's LoadBalancer Service
    svc = kubectl_json(cluster, "get", "service", f"{release}-proxy-public", "-n", ns)
    url = f"http://{svc['status']['loadBalancer']['ingress'][0]['ip']}:8080"
    until(cluster, ns, lambda: answers(f"{url}/hub/health"), 180, "the hub answers at its address")
    # the proxy sends what it has no route for to the hub: aviflow-api's route is the hub's
    # to add, at its start or at its next route check (every 60 s) if the proxy came later
    until(
        cluster,
        ns,
        lambda: answers(f"{url}/services/aviflow-api/api/v1/openapi.json"),
        120,
        "the hub has routed aviflow-api at the proxy",
    )
    assert spawn_page(url, "alice", PASSWORD) == ["Small (1 CPU)"]  # her browser's view
    alice = User(url, "alice", PASSWORD)
    assert alice.api("queues")  # aviflow-api, through the proxy, knows her
    alice.spawn("small")
    step("spawned")
    # her notebook runs in the notebooks' namespace, apart from the hub's
    [nb] = kubectl_json(cluster, "get", "pods", "-n", nb_ns, "-l", "component=singleuser-server")[
        "items"
    ]
    assert (
        kubectl_json(cluster, "get", "pods", "-n", ns, "-l", "component=singleuser-server")["items"]
        == []
    )
    assert (
        nb["spec"]["nodeName"].startswith("cpu-")
        and nb["spec"]["automountServiceAccountToken"] is False
    )
    assert nb["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "1"
    assert nb["status"]["containerStatuses"][0]["imageID"] == notebook["digest"]
    # a live kernel holding a variable: it must outlive the hub's upgrades and restarts
    notebook_url = f"{url}/user/alice/"
    kernel = start_kernel(notebook_url, alice.token)
    assert execute(notebook_url, alice.token, kernel, "kept = 6 * 7") == ("", None)

    step("a cell in her notebook: two jobs of 2 GPUs on her team's 2-G")
    # a cell in her notebook: two jobs of 2 GPUs on her team's 2-GPU quota, through
    # aviflow-api (by its Service name); the first holds the quota, the second waits
    out, error = run_in_kernel(f"{url}/user/alice/", alice.token, CELL, timeout=300)
    assert error is None, (error, out)
    lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
    api_url = f"http://{release}-api.{ns}.svc:8088/services/aviflow-api/"
    assert lines.get("backend") == f"HubBackend {api_url}", out
    assert lines["queue"] == "vision", out
    holder, job_id = lines["holds-quota"], lines["from-notebook"]
    # a hostile job from the same notebook (1 GPU): it runs once the second has finished
    hostile_id = submit_hostile(url, alice)
    hostile_run = RunDir(runs / "alice" / hostile_id)
    control = hostile_run.spec_path.read_bytes(), hostile_run.meta_path.read_bytes()
    until(cluster, ns, lambda: alice.api(f"jobs/{holder}")["state"] == "RUNNING", 300, "it runs")
    until(
        cluster,
        ns,
        lambda: "waiting for admission" in (alice.api(f"jobs/{job_id}").get("message") or ""),
        120,
        "the second waits for quota, and says why",
    )
    assert alice.api(f"jobs/{job_id}")["state"] == "QUEUED"

    step("kubectl users are held to their team's namespace")
    kubectl_users_held_to_their_team(cluster, vision_ns, nlp_ns, job_id)

    step("the admin raises the quota and changes the profile: nothing ")
    # the admin raises the quota and changes the profile: nothing else to do
    token_before = kubectl_json(cluster, "get", "secret", f"{release}-hub", "-n", ns)["data"]
    pods_before = {
        c: {p["metadata"]["uid"] for p in pods_of(c)} for c in ("hub", "api", "controller", "proxy")
    }
    done = helm_run(
        helm, cluster, home, "upgrade", release, str(CHART), "-n", ns, "-f", str(values(4, 2)),
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    secret = kubectl_json(cluster, "get", "secret", f"{release}-hub", "-n", ns)["data"]
    assert secret["api-token"] == token_before["api-token"]  # generated once, kept
    cq = kubectl_json(cluster, "get", "clusterqueue", f"{release}-vision")
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "4"}

    step("the config changed: new hub and aviflow-api pods (the contro")

    # the config changed: new hub and aviflow-api pods (the controller's settings did not)
    def rolled() -> dict[str, bool | None]:
        """Per component: whether its live pods are all new (True) or all the same (False);
        None in between (a rollout under way)."""
        out: dict[str, bool | None] = {}
        for c, before in pods_before.items():
            live = {
                p["metadata"]["uid"]
                for p in pods_of(c)
                if not p["metadata"].get("deletionTimestamp")
            }
            same = live == before
            new = len(live) == len(before) and not live & before
            out[c] = False if same else True if new else None
        return out

    until(
        cluster,
        ns,
        lambda: rolled() == {"hub": True, "api": True, "controller": False, "proxy": False},
        180,
        "the hub and aviflow-api are rolled, the controller and the proxy are not",
    )
    step("the new hub keeps its database: the sa")
    # the new hub keeps its database: the same token still works
    until(cluster, ns, lambda: answers(f"{url}/hub/health"), 180, "the new hub answers")

    def kept_alive(what: str) -> None:
        """Alice's notebook pod, its kernel and its route through the proxy are the ones of
        before, and the kernel still holds her variable."""
        [now] = kubectl_json(
            cluster, "get", "pods", "-n", nb_ns, "-l", "component=singleuser-server"
        )["items"]
        assert now["metadata"]["uid"] == nb["metadata"]["uid"], what
        assert execute(notebook_url, alice.token, kernel, "print(kept)") == ("42\n", None), what
        assert alice.server() is not None, what  # the new hub knows it runs

    kept_alive("after an upgrade that rolled the hub")
    step("a rollout restart of the hub keeps her notebook too")
    cluster.kubectl("rollout", "restart", f"deployment/{release}-hub", "-n", ns)
    cluster.kubectl("rollout", "status", f"deployment/{release}-hub", "-n", ns, "--timeout=180s")
    until(cluster, ns, lambda: answers(f"{url}/hub/health"), 180, "the restarted hub answers")
    kept_alive("after a rollout restart of the hub")
    until(
        cluster,
        ns,
        lambda: alice.api(f"jobs/{job_id}")["state"] == "SUCCEEDED",
        600,
        "the waiting job trains to the end, next to the first",
    )
    assert alice.api(f"jobs/{holder}")["state"] == "RUNNING"

    step("a hostile job from her notebook: what its code writes steers nothing")
    hostile_job = hostile_steers_nothing(cluster, ns, vision_ns, url, alice, hostile_run, control)

    r = requests.post(
        f"{url}/services/aviflow-api/api/v1/jobs/{holder}/cancel",
        json={},
        headers=alice.headers,
        timeout=60,
    )
    # asked for at once (202, with its state then: running still, unless the controller was
    # quicker than the answer); the controller ends it
    assert r.status_code == 202 and r.json()["cancelled"] is True, r.text
    assert r.json()["state"] in ("RUNNING", "CANCELLED"), r.text
    until(
        cluster,
        ns,
        lambda: alice.api(f"jobs/{holder}")["state"] == "CANCELLED",
        300,
        "she cancels the first",
    )
    job_dir = RunDir(runs / "alice" / job_id)  # its data part: what its pods wrote
    rows = [json.loads(line) for line in job_dir.metrics_path.read_text().splitlines()]
    assert job_dir.metrics_path.parent == job_dir.path / DATA_DIR
    assert [r["step"] for r in rows][-1] == 10
    pods = kubectl_json(cluster, "get", "pods", "-n", vision_ns, "-l", f"aviflow.dev/job={job_id}")
    assert sorted(p["spec"]["nodeName"][:4] for p in pods["items"]) == ["hgx-", "hgx-"]
    step("usage: the jobs' GPU time, accounted to team vision")
    # usage: the three jobs' GPU time (the hostile one's too, its one attempt), to team vision
    [row] = until(
        cluster,
        ns,
        lambda: [r for r in alice.api("usage")["rows"] if r["jobs"] == 3],
        60,
        "the ledger has the three jobs",
    )
    assert (row["key"], row["jobs"], row["attempts"]) == ("vision", 3, 3), row
    assert row["gpu_seconds"] > 2 * 5, row
    assert [r["key"] for r in alice.api("usage")["rows"]] == ["vision"], hostile_job

    step("the changed profile reaches the next spawn")
    # the changed profile reaches the next spawn
    alice.stop()
    assert spawn_page(url, "alice", PASSWORD) == ["Small (2 CPU)"]
    alice.spawn("small")
    step("spawned")
    [nb] = kubectl_json(cluster, "get", "pods", "-n", nb_ns, "-l", "component=singleuser-server")[
        "items"
    ]
    assert nb["spec"]["containers"][0]["resources"]["limits"]["cpu"] == "2"
    alice.stop()

    step("rollback: the quota and profile of revision 1 again")
    # rollback: the quota and profile of revision 1 again
    done = helm_run(helm, cluster, home, "rollback", release, "1", "-n", ns, "--wait")
    assert done.returncode == 0, done.stderr
    cq = kubectl_json(cluster, "get", "clusterqueue", f"{release}-vision")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "2"
    history = helm_run(helm, cluster, home, "history", release, "-n", ns, "-o", "json")
    assert [h["revision"] for h in json.loads(history.stdout)] == [1, 2, 3]

    step("TLS: the proxy serves HTTPS with the admin's certificate")
    address = svc["status"]["loadBalancer"]["ingress"][0]["ip"]
    ca, crt, key = server_certificate("hub", ips=(address,))
    (tmp_path / "ca.pem").write_bytes(ca)
    (tmp_path / "tls.crt").write_bytes(crt)
    (tmp_path / "tls.key").write_bytes(key)
    cluster.kubectl(
        "create", "secret", "tls", "hub-tls", "-n", ns,
        f"--cert={tmp_path / 'tls.crt'}", f"--key={tmp_path / 'tls.key'}",
    )  # fmt: skip
    done = helm_run(
        helm, cluster, home, "upgrade", release, str(CHART), "-n", ns,
        "-f", str(values(2, 1, https="hub-tls")), "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    secure = f"https://{address}:8080"
    until(
        cluster,
        ns,
        lambda: answers(f"{secure}/hub/health", verify=str(tmp_path / "ca.pem")),
        180,
        "the hub answers over TLS, with the Secret's certificate",
    )
    until(  # a new proxy pod (its config changed): the hub routes aviflow-api there again
        cluster,
        ns,
        lambda: answers(
            f"{secure}/services/aviflow-api/api/v1/openapi.json", verify=str(tmp_path / "ca.pem")
        ),
        120,
        "the hub has routed aviflow-api at the new proxy",
    )
    r = requests.get(
        f"{secure}/services/aviflow-api/api/v1/queues",
        headers=alice.headers,
        verify=str(tmp_path / "ca.pem"),
        timeout=60,
    )
    assert r.status_code == 200, (r.status_code, r.text)  # her token, over TLS

    step("uninstall: what stays is the CRD (with the TrainJobs), the users' namespaces and")
    # uninstall: what stays is the CRD (with the TrainJobs), the users' namespaces (homes,
    # jobs) and the claims and volumes holding data (the run store, the hub's database,
    # aviflow-api's ledger, the user's home)
    done = helm_run(helm, cluster, home, "uninstall", release, "-n", ns, "--wait")
    assert done.returncode == 0, done.stderr
    for space in (ns, nb_ns, vision_ns, nlp_ns):
        for kind in (
            "deployments",
            "services",
            "secrets",
            "serviceaccounts",
            "roles",
            "rolebindings",
            "configmaps",
            "networkpolicies",
            "localqueues",
        ):
            names = cluster.kubectl("get", kind, "-n", space, "-o", "name").stdout.split()
            assert [
                n
                for n in names
                if release in n or n.endswith(("/vision", "/nlp", "/aviflow-queues"))
            ] == [], (space, kind, names)
    for kind in (
        "clusterqueues",
        "resourceflavors",
        "topologies",
        "validatingadmissionpolicies",
        "clusterroles",
        "clusterrolebindings",
    ):
        names = cluster.kubectl("get", kind, "-o", "name").stdout.split()
        assert [n for n in names if release in n or "aviflow-queue-access" in n] == [], (
            kind,
            names,
        )
    assert cluster.kubectl("get", "crd", "trainjobs.aviflow.dev", "-o", "name").stdout.strip()
    claims = {
        space: sorted(cluster.kubectl("get", "pvc", "-n", space, "-o", "name").stdout.split())
        for space in (ns, nb_ns, vision_ns, nlp_ns)
    }
    runs_claim = f"persistentvolumeclaim/{release}-runs"
    assert claims == {
        ns: sorted(
            [
                runs_claim,
                f"persistentvolumeclaim/{release}-api-db",
                f"persistentvolumeclaim/{release}-hub-db",
            ]
        ),
        nb_ns: ["persistentvolumeclaim/aviflow-home-alice"],
        vision_ns: [runs_claim],
        nlp_ns: [runs_claim],
    }
    volumes = cluster.kubectl("get", "pv", "-o", "name").stdout.split()
    assert sorted(v for v in volumes if release in v) == [
        f"persistentvolume/{release}-runs-{space}" for space in sorted((ns, vision_ns, nlp_ns))
    ]
    until(
        cluster,
        ns,
        lambda: (
            not kubectl_json(
                cluster, "get", "pods", "-n", ns, "-l", f"app.kubernetes.io/instance={release}"
            )["items"]
        ),
        120,
        "the release's pods are gone",
    )
    # what the admin would delete by hand to remove everything (the cluster is this module's)
    cluster.kubectl("delete", "namespace", nb_ns, vision_ns, nlp_ns, "--wait=false")
