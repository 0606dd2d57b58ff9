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
import uuid
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml
from aviflow_images import own_cluster, trainer_images_entry
from aviflow_pool import run_store_volume

from aviflow_testcluster import Cluster, wait_for

from .conftest import CHART, EXAMPLES, Render

pytestmark = [pytest.mark.cluster, pytest.mark.images, pytest.mark.timeout(1800)]

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()


@pytest.fixture(scope="module")
def chart_cluster(
    built_images: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A cluster of its own: the chart's cluster-scoped objects (the CRD, the policy, Kueue's
    flavors) must not meet those other tests apply to the session's cluster."""
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


def explain(cluster: Cluster, ns: str) -> str:
    """What a person would look at when the release misbehaves: the controller's log, the
    TrainJobs, Workloads and pods."""
    out = []
    for args in (
        ("logs", "-n", ns, "-l", "app.kubernetes.io/component=controller", "--tail=60"),
        ("get", "trainjobs,workloads,pods,jobs", "-n", ns, "-o", "wide"),
        ("get", "trainjobs", "-n", ns, "-o", "jsonpath={.items[*].status}"),
    ):
        done = cluster.kubectl(*args, check=False)
        out.append(f"$ kubectl {' '.join(args)}\n{done.stdout}{done.stderr}")
    return "\n".join(out)


def until(cluster: Cluster, ns: str, ok: Any, timeout: float, said: str) -> Any:
    try:
        return wait_for(ok, timeout, said)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{explain(cluster, ns)}") from None


def kubectl_json(cluster: Cluster, *args: str) -> Any:
    return json.loads(cluster.kubectl(*args, "-o", "json").stdout)


def test_every_rendered_object_passes_a_server_side_dry_run(
    chart_cluster: Cluster, render: Render
) -> None:
    chart_cluster.create_namespace("aviflow")
    for case in ([], [EXAMPLES / "multi-team.yaml"]):
        docs = render(*case)
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


def test_install_upgrade_rollback_uninstall(
    chart_cluster: Cluster,
    helm: Path,
    built_images: dict[str, dict[str, Any]],
    tmp_path: Path,
) -> None:
    cluster = chart_cluster
    ns = cluster.create_namespace("chart")
    release = f"av{uuid.uuid4().hex[:6]}"
    trainer = built_images["trainer"]
    runs = tmp_path / "runs"
    runs.mkdir()
    os.chown(runs, 1000, 1000)  # as a provisioner's volume for pods of uid 1000 would be
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input="\n---\n".join(json.dumps(o) for o in run_store_volume(ns, str(runs), f"{ns}-runs")),
    )
    repository, tag = trainer["image"].rsplit(":", 1)

    def values(gpus: int) -> Path:
        path = tmp_path / f"values-{gpus}.yaml"
        path.write_text(
            yaml.safe_dump(
                {
                    "teams": [
                        {
                            "name": "vision",
                            "groups": ["vision"],
                            "queue": "vision",
                            "gpuQuota": gpus,
                        },
                        {"name": "nlp", "groups": ["nlp"], "queue": "nlp", "gpuQuota": 2},
                    ],
                    "api": {"kubernetes": {"images": [trainer_images_entry(trainer)]}},
                    "images": {"controller": {"repository": repository, "tag": tag}},
                    "runStore": {"existingClaim": "aviflow-runs"},
                }
            )
        )
        return path

    home = tmp_path / "helm-home"
    done = helm_run(
        helm, cluster, home, "install", release, str(CHART), "-n", ns, "-f", str(values(2)),
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # the controller runs in the trainer image, under its own service account
    [pod] = kubectl_json(
        cluster, "get", "pods", "-n", ns, "-l", "app.kubernetes.io/component=controller"
    )["items"]
    assert pod["spec"]["serviceAccountName"] == f"{release}-controller"
    assert pod["status"]["containerStatuses"][0]["imageID"] == trainer["digest"]

    # team members may create TrainJobs with kubectl in this namespace (the test's grant)
    cluster.kubectl(
        "create", "role", "trainjobs", "-n", ns, "--verb=create,get,list,watch",
        "--resource=trainjobs.aviflow.dev",
    )  # fmt: skip
    cluster.kubectl(
        "create", "rolebinding", "trainjobs", "-n", ns, "--role=trainjobs",
        "--group=vision", "--group=nlp",
    )  # fmt: skip
    body = {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {"name": "waits-for-quota", "namespace": ns},
        "spec": {
            "queue": "vision",
            "nodes": 2,
            "gpusPerNode": 2,
            "script": TINY,
            "env": {"TINY_STEPS": "10"},
        },
    }
    # the queue-access policy: an nlp member may not use vision's queue
    refused = cluster.kubectl(
        "apply", "--as=bob", "--as-group=nlp", "-f", "-", input=json.dumps(body), check=False
    )
    assert refused.returncode != 0
    assert "aviflow-queue-access" in refused.stderr and "vision" in refused.stderr, refused.stderr
    done = cluster.kubectl(
        "apply", "--as=alice", "--as-group=vision", "-f", "-", input=json.dumps(body)
    )
    assert done.stdout.strip() == "trainjob.aviflow.dev/waits-for-quota created"

    def status() -> dict[str, Any]:
        return (
            kubectl_json(cluster, "get", "trainjob", "waits-for-quota", "-n", ns).get("status")
            or {}
        )

    # 4 GPUs on a 2-GPU quota: it waits, and says why
    until(
        cluster, ns, lambda: "waiting for admission" in status().get("message", ""), 120, "it waits"
    )
    assert status()["state"] == "QUEUED"

    # raising the quota is all it takes
    done = helm_run(
        helm, cluster, home, "upgrade", release, str(CHART), "-n", ns, "-f", str(values(4)),
        "--wait", "--timeout", "5m",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cq = kubectl_json(cluster, "get", "clusterqueue", f"{release}-vision")
    gpu = cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]
    assert gpu == {"name": "nvidia.com/gpu", "nominalQuota": "4"}
    until(
        cluster, ns, lambda: status().get("state") == "SUCCEEDED", 600, "the job trains to the end"
    )
    job_dir = next(runs.glob("*/waits-for-quota"))
    assert (job_dir / "meta.json").stat().st_uid == 1000  # the controller's uid made it
    rows = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows][-1] == 10

    # rollback: the quota of revision 1 again
    done = helm_run(helm, cluster, home, "rollback", release, "1", "-n", ns, "--wait")
    assert done.returncode == 0, done.stderr
    cq = kubectl_json(cluster, "get", "clusterqueue", f"{release}-vision")
    assert cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] == "2"
    history = helm_run(helm, cluster, home, "history", release, "-n", ns, "-o", "json")
    assert [h["revision"] for h in json.loads(history.stdout)] == [1, 2, 3]

    # uninstall: only the CRD (with the TrainJobs) and the run store's claim stay
    done = helm_run(helm, cluster, home, "uninstall", release, "-n", ns, "--wait")
    assert done.returncode == 0, done.stderr
    for kind in (
        "deployments",
        "serviceaccounts",
        "roles",
        "rolebindings",
        "configmaps",
        "localqueues",
    ):
        names = cluster.kubectl("get", kind, "-n", ns, "-o", "name").stdout.split()
        assert [
            n for n in names if release in n or n.endswith(("/vision", "/nlp", "/aviflow-queues"))
        ] == [], (kind, names)
    for kind in ("clusterqueues", "resourceflavors", "topologies", "validatingadmissionpolicies"):
        names = cluster.kubectl("get", kind, "-o", "name").stdout.split()
        assert [n for n in names if release in n or "aviflow-queue-access" in n] == [], (
            kind,
            names,
        )
    assert cluster.kubectl("get", "crd", "trainjobs.aviflow.dev", "-o", "name").stdout.strip()
    assert cluster.kubectl("get", "pvc", "aviflow-runs", "-n", ns, "-o", "name").stdout.strip()
