"""The hub's KubeSpawner configuration on the real test control plane (tests/cluster).

A real JupyterHub runs with ``spawner: kubernetes`` (the settings the Helm chart uses) against
the ``k8s_cluster`` fixture's apiserver (``$KUBECONFIG``). alice (group ``a``) chooses the
profile only group ``a`` may use; the hub creates her notebook pod and its home PVC; the
scheduler puts the pod on a CPU node; the node agent runs ``jupyterhub-singleuser`` (the
container's args) inside the built notebook image, as its user jovyan (uid 1000), and the hub
reaches it at the pod's address. bob, not in group ``a``, cannot choose that profile.

What the emulation changes, set in the config below and explained in tests/cluster/README.md:
pods share the host network, hence ``notebookBind: podIP`` and a free ``notebookPort``.
A kernel of the pod's server runs ``%load_ext aviflow`` and lists jobs through aviflow-api.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from aviflow_pool import home_storage
from kubernetes import client

from aviflow._units import parse_quantity
from aviflow_testcluster import free_port

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

POOL = "aviflow.dev/node-pool"
NOTEBOOK_CODE = """
import os
%load_ext aviflow
import aviflow
from aviflow.backends import get_backend
import sys
print("ip", os.environ["POD_IP"])
print("backend", type(get_backend()).__name__)
print("jobs", aviflow.jobs())
print("python", sys.executable, aviflow.__file__, os.getuid())
"""
TOLERATION = {"key": "aviflow.dev/notebooks", "operator": "Exists", "effect": "NoSchedule"}


def _profiles(image: str) -> list[dict[str, Any]]:
    return [
        {
            "slug": "small",
            "displayName": "Small",
            "cpu": "500m",
            "memory": "1Gi",
            "image": image,
            "nodeSelector": {POOL: "cpu"},
            "default": True,
        },
        {
            "slug": "team-a-medium",
            "displayName": "Medium (team a)",
            "cpu": 2,
            "memory": "3Gi",
            "image": image,
            "nodeSelector": {POOL: "cpu"},
            "tolerations": [TOLERATION],
            "groups": ["a"],
        },
    ]


def _delete_storage(api: client.ApiClient, name: str) -> None:
    for delete in (
        client.CoreV1Api(api).delete_persistent_volume,
        client.StorageV1Api(api).delete_storage_class,
    ):
        try:
            delete(name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def _pods(core: client.CoreV1Api, namespace: str, user: str) -> list[Any]:
    selector = f"component=singleuser-server,hub.jupyter.org/username={user}"
    return core.list_namespaced_pod(namespace, label_selector=selector).items


def _listeners(port: int) -> list[str]:
    return sorted(
        c.laddr.ip
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    )


def test_kubespawner_spawns_the_chosen_profile_on_a_cpu_node(
    k8s_cluster: Any,
    restricted_namespace: str,
    hub_factory: Any,
    hub_config: Any,
    run_in_kernel: Any,
    tmp_path: Path,
    built_images: dict[str, dict[str, Any]],
) -> None:
    k8s_namespace = restricted_namespace  # Pod Security `restricted`, enforced
    notebook = built_images["notebook"]
    storage_name = f"aviflow-hub-{uuid.uuid4().hex[:8]}"
    port = free_port()
    cfg = hub_config(
        hub={
            **hub_config()["hub"],
            "spawner": "kubernetes",
            "namespace": k8s_namespace,
            "notebookPort": port,
            "notebookBind": "podIP",
        },
        profiles=_profiles(notebook["image"]),
        storage={"capacity": "1Gi", "storageClass": storage_name, "mountPath": "/home/jovyan"},
    )
    with k8s_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        home_storage(api, storage_name, tmp_path / "pv")
        try:
            hub = hub_factory(cfg, env={"KUBECONFIG": str(k8s_cluster.kubeconfig)})
            alice, bob = hub.token("alice"), hub.token("bob")

            # bob (group b) may not choose team a's profile: refused with a 400 that names his
            # choices; no server, no pod, no PVC.
            r = requests.post(
                f"{hub.url}/hub/api/users/bob/server",
                json={"profile": "team-a-medium"},
                headers={"Authorization": f"token {bob}"},
                timeout=300,
            )
            assert (r.status_code, r.json()["message"]) == (
                400,
                "No such profile: team-a-medium. Options include: small",
            ), r.text
            assert hub.server("bob", bob) is None
            assert _pods(core, k8s_namespace, "bob") == []
            assert not [
                c
                for c in core.list_namespaced_persistent_volume_claim(k8s_namespace).items
                if "bob" in c.metadata.name
            ]

            server = hub.spawn("alice", alice, {"profile": "team-a-medium"}, timeout=900)
            assert server["user_options"] == {"profile": "team-a-medium"}
            [pod] = _pods(core, k8s_namespace, "alice")
            [container] = pod.spec.containers
            res = container.resources
            assert {k: parse_quantity(v) for k, v in res.requests.items()} == {
                "cpu": 2,
                "memory": 3 * 2**30,
            }
            assert {k: parse_quantity(v) for k, v in res.limits.items()} == {
                "cpu": 2,
                "memory": 3 * 2**30,
            }
            assert pod.spec.node_selector == {POOL: "cpu"}
            # Pod Security `restricted`, which the namespace enforces: the pod was admitted
            sc = container.security_context
            assert (sc.run_as_user, sc.run_as_non_root, sc.allow_privilege_escalation) == (
                1000,
                True,
                False,
            )
            assert (sc.capabilities.drop, sc.seccomp_profile.type) == (["ALL"], "RuntimeDefault")
            tolerations = [t.to_dict() for t in pod.spec.tolerations or []]
            assert {
                "key": TOLERATION["key"],
                "operator": "Exists",
                "effect": "NoSchedule",
                "value": None,
                "toleration_seconds": None,
            } in tolerations
            assert not any(t["key"] == "nvidia.com/gpu" for t in tolerations)
            node = core.read_node(pod.spec.node_name)
            assert pod.spec.node_name.startswith("cpu-") and node.metadata.labels[POOL] == "cpu"
            assert pod.status.phase == "Running" and pod.status.pod_ip.startswith("127.")

            env = {e.name: e for e in container.env}
            api_port = cfg["api"]["port"]
            assert (
                env["AVIFLOW_API_URL"].value == f"http://127.0.0.1:{api_port}/services/aviflow-api/"
            )
            assert env["JUPYTERHUB_USER"].value == "alice"
            assert env["JUPYTERHUB_API_TOKEN"].value
            assert (
                env["JUPYTERHUB_API_URL"].value
                == f"http://127.0.0.1:{cfg['hub']['hubPort']}/hub/api"
            )
            assert env["JUPYTERHUB_SERVICE_URL"].value == f"http://$(POD_IP):{port}/user/alice/"
            assert env["POD_IP"].value_from.field_ref.field_path == "status.podIP"
            assert container.args == ["jupyterhub-singleuser"]
            assert container.image == notebook["image"]
            [status] = pod.status.container_statuses
            assert status.image_id == notebook["digest"]  # the agent ran the built image
            [claim] = [
                v.persistent_volume_claim.claim_name
                for v in pod.spec.volumes
                if v.persistent_volume_claim
            ]
            assert claim == "aviflow-home-alice"
            assert (
                core.read_namespaced_persistent_volume_claim(claim, k8s_namespace).status.phase
                == "Bound"
            )

            # The hub reaches the server the agent runs, listening on the pod's own address.
            assert _listeners(port) == [pod.status.pod_ip]
            headers = {"Authorization": f"token {alice}"}
            status = requests.get(f"{hub.url}/user/alice/api/status", headers=headers, timeout=60)
            assert status.status_code == 200, status.text
            assert set(status.json()) >= {"started", "last_activity", "kernels", "connections"}
            # The working directory is the user's volume: a file saved in Jupyter lands on the PV.
            put = requests.put(
                f"{hub.url}/user/alice/api/contents/hello.txt",
                headers=headers,
                timeout=60,
                json={"type": "file", "format": "text", "content": "hi"},
            )
            assert put.status_code == 201, put.text
            assert (tmp_path / "pv" / "hello.txt").read_text() == "hi"
            assert (tmp_path / "pv" / "hello.txt").stat().st_uid == 1000  # jovyan's

            # A kernel in the pod loads the magic and reaches aviflow-api with the pod's token.
            out, error = run_in_kernel(f"{hub.url}/user/alice/", alice, NOTEBOOK_CODE)
            assert error is None, (error, out)
            assert out.splitlines() == [
                f"ip {pod.status.pod_ip}",
                "backend HubBackend",
                "jobs []",
                # the image's Python and aviflow, as jovyan: not this machine's
                "python /opt/aviflow/bin/python3 "
                "/opt/aviflow/lib/python3.11/site-packages/aviflow/__init__.py 1000",
            ]

            hub.stop_server("alice", alice)
            deadline = time.monotonic() + 300
            while _pods(core, k8s_namespace, "alice"):
                assert time.monotonic() < deadline, "the notebook pod was not deleted"
                time.sleep(1)
            deadline = time.monotonic() + 120
            while _listeners(port):
                assert time.monotonic() < deadline, "the single-user server outlived its pod"
                time.sleep(1)
        finally:
            _delete_storage(api, storage_name)
