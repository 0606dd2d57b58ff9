"""Pods on the test control plane run inside their images (issue 10, item 6): the node agent
unpacks an image of the local OCI layouts once per digest and runs each container in it, with
the image's entrypoint, command, environment, working directory and user under the pod's own;
an image that is not there makes the pod wait with ErrImagePull, then ImagePullBackOff."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aviflow_images import own_cluster

from aviflow_testcluster import Cluster, wait_for

pytestmark = [pytest.mark.images, pytest.mark.cluster, pytest.mark.timeout(1200)]

PROBE = textwrap.dedent("""
    import json, os, socket, sys
    import aviflow, torch
    result = {
        "uid": os.getuid(), "gid": os.getgid(), "cwd": os.getcwd(), "python": sys.executable,
        "aviflow": aviflow.__file__, "torch": torch.__version__.split("+")[0],
        "hostname": socket.gethostname(), "x": os.environ.get("X"), "home": os.environ.get("HOME"),
        "hosts": open("/etc/hosts").read().split(),
    }
    open("/out/result.json", "w").write(json.dumps(result))
    print("probe done")
""")


@pytest.fixture(scope="module")
def image_cluster(
    built_images: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    """A small cluster of its own, not in host mode: a pod runs in its image or not at all."""
    with own_cluster(tmp_path_factory.mktemp("image-cluster")) as cluster:
        yield cluster


def pod(name: str, image: str, **container: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 2,
        "containers": [{"name": "main", "image": image, **container}],
    }
    for key in ("volumes", "securityContext"):
        if key in container:
            spec[key] = container.pop(key)
            spec["containers"][0].pop(key, None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def apply(cluster: Cluster, namespace: str, obj: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj))


def status(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    out = cluster.kubectl("get", "pod", name, "-n", namespace, "-o", "json").stdout
    return json.loads(out).get("status", {})


def finished(cluster: Cluster, namespace: str, name: str, timeout: float = 180) -> dict[str, Any]:
    wait_for(
        lambda: status(cluster, namespace, name).get("phase") in ("Succeeded", "Failed"),
        timeout,
        f"pod {name} finished",
    )
    return status(cluster, namespace, name)


def test_a_pod_runs_in_its_image_as_the_image_user(
    image_cluster: Cluster, built_images: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    ns = image_cluster.create_namespace("in-image")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    trainer = built_images["trainer"]
    apply(
        image_cluster,
        ns,
        pod(
            "probe",
            trainer["image"],
            command=["python", "-c", PROBE],
            env=[{"name": "X", "value": "from the pod"}],
            volumeMounts=[{"name": "out", "mountPath": "/out"}],
            volumes=[{"name": "out", "hostPath": {"path": str(out), "type": "Directory"}}],
        ),
    )
    st = finished(image_cluster, ns, "probe")
    logs = image_cluster.kubectl("logs", "probe", "-n", ns).stdout
    assert (st["phase"], logs) == ("Succeeded", "probe done\n"), st
    assert st["containerStatuses"][0]["imageID"] == trainer["digest"]
    result = json.loads((out / "result.json").read_text())
    assert {k: result[k] for k in ("uid", "gid", "cwd", "python", "hostname", "x", "home")} == {
        "uid": 1000,
        "gid": 1000,
        "cwd": "/home/aviflow",
        "python": "/opt/aviflow/bin/python",
        "hostname": "probe",
        "x": "from the pod",
        "home": "/home/aviflow",
    }
    # the image's own aviflow and torch, not this checkout's
    assert result["aviflow"] == "/opt/aviflow/lib/python3.11/site-packages/aviflow/__init__.py"
    assert "probe" in result["hosts"]


def test_entrypoint_args_and_run_as_user_follow_kubernetes_rules(
    image_cluster: Cluster, built_images: dict[str, dict[str, Any]]
) -> None:
    ns = image_cluster.create_namespace("rules")
    trainer = built_images["trainer"]["image"]
    # no command, no args: the image's Entrypoint (tini) and Cmd (aviflow --help)
    apply(image_cluster, ns, pod("default-cmd", trainer))
    # args only: the image's Entrypoint with the pod's args; run as root by securityContext
    apply(
        image_cluster,
        ns,
        pod(
            "args",
            trainer,
            args=["sh", "-c", "echo uid=$(id -u) parent=$(cat /proc/$PPID/comm)"],
            securityContext={"runAsUser": 0},
        ),
    )
    st = finished(image_cluster, ns, "default-cmd")
    logs = image_cluster.kubectl("logs", "default-cmd", "-n", ns).stdout
    assert st["phase"] == "Succeeded" and logs.startswith("usage: aviflow "), logs
    st = finished(image_cluster, ns, "args")
    logs = image_cluster.kubectl("logs", "args", "-n", ns).stdout
    assert (st["phase"], logs) == ("Succeeded", "uid=0 parent=tini\n")


def test_an_image_that_is_not_built_waits_like_the_kubelet(
    image_cluster: Cluster, built_images: dict[str, dict[str, Any]]
) -> None:
    ns = image_cluster.create_namespace("no-image")
    tag = built_images["trainer"]["tag"]
    missing = f"localhost/aviflow/trainer:{tag}-not-built"
    apply(image_cluster, ns, pod("waits", missing, command=["true"]))

    def reason() -> str:
        cs = status(image_cluster, ns, "waits").get("containerStatuses") or [{}]
        return cs[0].get("state", {}).get("waiting", {}).get("reason", "")

    wait_for(lambda: reason() == "ErrImagePull", 60, "ErrImagePull")
    cs = status(image_cluster, ns, "waits")["containerStatuses"][0]
    assert cs["state"]["waiting"]["message"].startswith(
        f'Failed to pull image "{missing}": no image'
    )
    wait_for(lambda: reason() == "ImagePullBackOff", 60, "ImagePullBackOff")
    assert status(image_cluster, ns, "waits")["phase"] == "Pending"
    image_cluster.kubectl("delete", "pod", "waits", "-n", ns, "--wait=true", "--timeout=60s")
    left = image_cluster.kubectl("get", "pods", "-n", ns, "-o", "name").stdout
    assert left == ""
