"""Aviflow on the test control plane (``tests/cluster``): fixtures ``crd_installed`` and
``make_pool`` for every test layer (registered by ``tests/conftest.py``)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from aviflow_images import trainer_images_entry

from aviflow.k8s.crd import NAME, committed
from aviflow_testcluster import RESTRICTED, wait_for


def install_crd(cluster: Any) -> Any:
    """Apply the TrainJob CRD to ``cluster`` and wait until trainjobs are served."""
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=committed())
    cluster.kubectl("wait", "--for=condition=Established", f"crd/{NAME}", "--timeout=60s")
    # the API server serves the new resource a moment after it is Established
    deadline = time.monotonic() + 60
    while cluster.kubectl("get", "trainjobs", "-A", check=False).returncode != 0:
        assert time.monotonic() < deadline, "trainjobs are not served"
        time.sleep(0.5)
    return cluster


@pytest.fixture(scope="session")
def crd_installed(k8s_cluster: Any) -> Any:
    return install_crd(k8s_cluster)


# -- the HGX pool as Kueue sees it, and the Aviflow controller -----------------------------------
KUEUE = "kueue.x-k8s.io/v1beta2"
GPU = "nvidia.com/gpu"
TOPOLOGY_LEVELS = [
    "topology.aviflow.dev/block",
    "topology.aviflow.dev/rack",
    "kubernetes.io/hostname",
]


def pool_objects(
    prefix: str,
    namespace: str,
    teams: dict[str, dict[str, Any]],
    team_namespaces: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """A Topology and ResourceFlavor over the fake HGX nodes, then per team a ClusterQueue
    (``gpus`` nominal; ``cohort``, ``borrow``, ``lend`` optional) and a LocalQueue named
    after the team in ``namespace``, or in its own of ``team_namespaces`` (whose Workloads
    alone its ClusterQueue then admits, as the chart does)."""
    flavor = f"{prefix}-hgx"
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": KUEUE,
            "kind": "Topology",
            "metadata": {"name": f"{prefix}-topology"},
            "spec": {"levels": [{"nodeLabel": label} for label in TOPOLOGY_LEVELS]},
        },
        {
            "apiVersion": KUEUE,
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {
                "nodeLabels": {"aviflow.dev/node-pool": "hgx"},
                "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                "topologyName": f"{prefix}-topology",
            },
        },
    ]
    for team, q in teams.items():
        ns = (team_namespaces or {}).get(team, namespace)
        selector = {"matchLabels": {"kubernetes.io/metadata.name": ns}} if team_namespaces else {}
        gpu: dict[str, Any] = {"name": GPU, "nominalQuota": str(q["gpus"])}
        if "borrow" in q:
            gpu["borrowingLimit"] = str(q["borrow"])
        if "lend" in q:
            gpu["lendingLimit"] = str(q["lend"])
        cq: dict[str, Any] = {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": f"{prefix}-{team}"},
            "spec": {
                "namespaceSelector": selector,
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory", GPU],
                        "flavors": [
                            {
                                "name": flavor,
                                "resources": [
                                    {"name": "cpu", "nominalQuota": "1000"},
                                    {"name": "memory", "nominalQuota": "16Ti"},
                                    gpu,
                                ],
                            }
                        ],
                    }
                ],
            },
        }
        if "cohort" in q:
            cq["spec"]["cohortName"] = q["cohort"]
            cq["spec"]["preemption"] = {
                "reclaimWithinCohort": "Any",
                "withinClusterQueue": "LowerPriority",
            }
        objects.append(cq)
        objects.append(
            {
                "apiVersion": KUEUE,
                "kind": "LocalQueue",
                "metadata": {
                    "name": team,
                    "namespace": ns,
                    "labels": {"aviflow.dev/team": team},  # as the chart labels them
                },
                "spec": {"clusterQueue": f"{prefix}-{team}"},
            }
        )
    return objects


def run_store_volume(namespace: str, root: str, name: str) -> list[dict[str, Any]]:
    """A PersistentVolume over ``root`` (the run store this test's controller writes) and
    the claim ``aviflow-runs`` bound to it in ``namespace``."""
    return [
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Ti"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "storageClassName": "",
                "hostPath": {"path": root, "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": "aviflow-runs"},
            },
        },
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "aviflow-runs", "namespace": namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": name,
                "resources": {"requests": {"storage": "1Ti"}},
            },
        },
    ]


def hostpath_storage(name: str, paths: list[Path]) -> list[dict[str, Any]]:
    """A StorageClass ``name`` and one 1Gi ReadWriteOnce hostPath PersistentVolume per path
    (named ``name``, or ``name-<i>`` for several), for claims such as a KubeSpawner user's
    home or the chart's state. Each path is created and owned by uid 1000, the images' user,
    as a provisioner's volume would be (the kubelet does not apply ``fsGroup`` to hostPath
    volumes)."""
    import os

    objs: list[dict[str, Any]] = [
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "Immediate",
        }
    ]
    for i, path in enumerate(paths):
        path.mkdir(parents=True, exist_ok=True)
        os.chown(path, 1000, 1000)
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name if len(paths) == 1 else f"{name}-{i}"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": name,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": str(path), "type": "Directory"},
                },
            }
        )
    return objs


def home_storage(api: Any, name: str, path: Path) -> None:
    """:func:`hostpath_storage` with one volume over ``path``, created through ``api`` (delete
    the StorageClass and the PersistentVolume by ``name`` afterwards)."""
    from kubernetes import client

    storage_class, volume = hostpath_storage(name, [path])
    client.StorageV1Api(api).create_storage_class(storage_class)
    client.CoreV1Api(api).create_persistent_volume(volume)


class Pool:
    """A namespace wired for Aviflow: Kueue queues per team, the run store volume, the
    controller (in this process) and a KubernetesBackend for it. With ``team_namespaces``
    (team -> a namespace of its own, as the chart makes them) each team's LocalQueue, run
    store claim and jobs are in its namespace."""

    def __init__(
        self,
        cluster: Any,
        namespace: str,
        root: Path,
        teams: dict[str, dict[str, Any]],
        images: list[dict[str, Any]],
        team_namespaces: dict[str, str] | None = None,
        settings: dict[str, Any] | None = None,
    ) -> None:
        import uuid

        from aviflow.backends.kubernetes import KubernetesBackend
        from aviflow.k8s.settings import ClusterSettings

        self.cluster, self.namespace, self.root = cluster, namespace, root
        self.namespaces = sorted(set((team_namespaces or {}).values())) or [namespace]
        self.prefix = f"p{uuid.uuid4().hex[:8]}"
        self.objects = pool_objects(self.prefix, namespace, teams, team_namespaces)
        for ns in self.namespaces:
            self.objects += run_store_volume(ns, str(root), f"{self.prefix}-runs-{ns}")
        cluster.kubectl(
            "apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in self.objects)
        )
        self.settings = ClusterSettings.from_dict(
            {
                "namespace": namespace,
                "queueNamespaces": {q: ns for q, ns in (team_namespaces or {}).items()},
                "images": images,  # pods run in the built trainer image, as uid 1000
                "runs": {"localPath": str(root)},
                **(settings or {}),
            }
        )
        self.api = cluster.api_client()
        self.backend = KubernetesBackend(self.settings, api=self.api)
        self.controller: Any = None
        self.wait_active()

    def wait_active(self) -> None:
        from kubernetes import client

        co = client.CustomObjectsApi(self.api)
        for obj in self.objects:
            if obj["kind"] != "ClusterQueue":
                continue
            wait_for(
                lambda name=obj["metadata"]["name"]: any(
                    c["type"] == "Active" and c["status"] == "True"
                    for c in co.get_cluster_custom_object(
                        "kueue.x-k8s.io", "v1beta2", "clusterqueues", name
                    )
                    .get("status", {})
                    .get("conditions", [])
                ),
                60,
                f"ClusterQueue {obj['metadata']['name']} Active",
            )

    def start_controller(self, api: Any = None, **kw: Any) -> Any:
        """The controller in this process (``api``: its client, default the admin's; ``kw``:
        more of its arguments, such as ``resync`` or ``submission_grace``)."""
        from aviflow.operator import Controller
        from aviflow.store import RunStore

        kw = {"workers": 2, "resync": 10, **kw}
        self.controller = Controller(api or self.api, self.settings, RunStore(self.root), **kw)
        self.controller.start()
        return self.controller

    def stop_controller(self) -> None:
        if self.controller is not None:
            self.controller.stop()
            self.controller = None

    def client_as(self, service_account: str) -> Any:
        """An API client with a fresh token of ``service_account`` (in this namespace)."""
        from kubernetes import client

        token = self.cluster.kubectl(
            "create", "token", service_account, "-n", self.namespace
        ).stdout.strip()
        cfg = client.Configuration()
        admin = self.api.configuration
        cfg.host, cfg.ssl_ca_cert = admin.host, admin.ssl_ca_cert
        cfg.api_key = {"BearerToken": token}
        cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return client.ApiClient(cfg)

    def leftovers(self) -> dict[str, list[str]]:
        """Jobs, pods, services, network policies and workloads still in the namespaces."""
        out: dict[str, list[str]] = {}
        for kind in ("jobs", "pods", "services", "networkpolicies", "workloads.kueue.x-k8s.io"):
            for ns in self.namespaces:
                done = self.cluster.kubectl("get", kind, "-n", ns, "-o", "name")
                out.setdefault(kind, []).extend(done.stdout.split())
        return out

    def close(self) -> None:
        self.stop_controller()
        for ns in self.namespaces:
            self.cluster.kubectl(
                "delete", "trainjobs", "--all", "-n", ns, "--wait=false", check=False
            )
        reversed_docs = "\n---\n".join(json.dumps(o) for o in reversed(self.objects))
        self.cluster.kubectl(
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-f",
            "-",
            input=reversed_docs,
            check=False,
        )
        self.api.close()


@pytest.fixture(scope="session")
def trainer_images(built_images: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """The cluster settings' ``images`` list: the trainer image ``make images`` built."""
    return [trainer_images_entry(built_images["trainer"])]


@pytest.fixture
def make_pool(
    crd_installed: Any,
    restricted_namespace: str,
    tmp_path: Path,
    trainer_images: list[dict[str, Any]],
) -> Any:
    """``make_pool(teams={"vision": {"gpus": 8}}, controller=True) -> Pool``: its pods run
    in the built trainer image, in a namespace that enforces Pod Security ``restricted``
    (``settings``: more of the backend's settings, such as ``usage``)."""
    k8s_namespace = restricted_namespace
    pools: list[Pool] = []
    made: list[str] = []  # the teams' own namespaces

    def make(
        teams: dict[str, dict[str, Any]] | None = None,
        controller: bool = True,
        own_namespaces: bool = False,
        settings: dict[str, Any] | None = None,
    ) -> Pool:
        teams = teams or {"default": {"gpus": 8}}
        root = tmp_path / f"runs{len(pools)}"
        root.mkdir()
        spaces = None
        if own_namespaces:  # one per team, enforcing `restricted` too; deleted afterwards
            spaces = {t: crd_installed.create_namespace(labels=RESTRICTED) for t in teams}
            made.extend(spaces.values())
        pool = Pool(crd_installed, k8s_namespace, root, teams, trainer_images, spaces, settings)
        pools.append(pool)
        if controller:
            pool.start_controller()
        return pool

    yield make
    for pool in pools:
        pool.close()
    for ns in made:
        crd_installed.kubectl("delete", "namespace", ns, "--wait=false", check=False)
