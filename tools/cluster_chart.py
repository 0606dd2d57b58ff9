"""``make cluster-chart``: the Helm chart installed on the running test cluster, with the
built images (``make cluster-up`` and ``make images`` first).

What a provisioner and a registry would give a real cluster, this gives the test cluster:
hostPath volumes under ``.cluster/volumes`` (the run store's directory, and a storage class
``aviflow-state`` with volumes for the hub's database, aviflow-api's ledger and users' homes)
and the images from ``images/.build``. Then ``helm upgrade --install aviflow helm/aviflow``
in namespace ``aviflow`` with ``.cluster/values.yaml`` (written once: teams ``vision`` and
``nlp`` with 8 and 4 GPUs in one cohort, users alice and bob and an admin, passwords below; edit it and
run again to change a quota or a profile). It prints the hub's address.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / d) for d in ("cluster", "k8s", "images")]

from aviflow_images import trainer_images_entry  # noqa: E402
from aviflow_pool import hostpath_storage  # noqa: E402

from aviflow_testcluster import Cluster, _build  # noqa: E402

NAMESPACE = RELEASE = "aviflow"
PASSWORD = "aviflow-quickstart"
# The dev authenticator's admins log in with a password of their own, 32 characters at least.
ADMIN_PASSWORD = "aviflow-quickstart-admin-password"
STATE_CLASS = "aviflow-state"
STATE_VOLUMES = 6  # hub database, ledger, four homes


def built_images() -> dict[str, dict[str, Any]]:
    report = ROOT / "images" / ".build" / "images.jsonl"
    rows = [json.loads(line) for line in report.read_text().splitlines()] if report.exists() else []
    found = {row["name"]: row for row in rows}
    missing = sorted({"hub", "notebook", "trainer"} - set(found))
    if missing:
        raise SystemExit(f"images not built: {', '.join(missing)}; run `make images` first")
    return found


def values(images: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def image(ref: str) -> dict[str, str]:
        repository, tag = ref.rsplit(":", 1)
        return {"repository": repository, "tag": tag}

    trainer = images["trainer"]
    return {
        "hub": {"groups": {"vision": ["alice"], "nlp": ["bob"]}, "admins": ["admin"]},
        "auth": {
            "type": "dev",
            # the test control plane's load balancer is a loopback address of this machine
            "dev": {
                "userPassword": PASSWORD,
                "adminPassword": ADMIN_PASSWORD,
                "allowOnPublicAddress": True,
            },
        },
        "teams": [
            {
                "name": "vision",
                "groups": ["vision"],
                "queue": "vision",
                "gpuQuota": 8,
                "cohort": "hgx",
            },
            {"name": "nlp", "groups": ["nlp"], "queue": "nlp", "gpuQuota": 4, "cohort": "hgx"},
        ],
        "profiles": [
            {
                "slug": "small",
                "displayName": "Small (1 CPU, 2 GiB)",
                "cpu": 1,
                "memory": "2Gi",
                "image": images["notebook"]["image"],
                "nodeSelector": {"aviflow.dev/node-pool": "cpu"},
                "default": True,
            }
        ],
        "storage": {"capacity": "1Gi", "storageClass": STATE_CLASS},
        "api": {"kubernetes": {"images": [trainer_images_entry(trainer)]}},
        "images": {"hub": image(images["hub"]["image"]), "controller": image(trainer["image"])},
        "state": {"storageClass": STATE_CLASS},
        # the chart binds a volume on it to a claim in its namespace and in each team's
        "runStore": {"volume": {"hostPath": {"path": str(ROOT / ".cluster" / "volumes" / "runs")}}},
        "kubectlAccess": {"enabled": True},
    }


def storage(volumes: Path) -> list[dict[str, Any]]:
    """The run store's directory (the chart makes its volumes) and the state volumes, as a
    provisioner would make them (owned by the images' uid 1000)."""
    runs = volumes / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    os.chown(runs, 1000, 1000)
    state = [volumes / f"state-{i}" for i in range(STATE_VOLUMES)]
    return hostpath_storage(STATE_CLASS, state)


def main() -> int:
    workdir = ROOT / ".cluster"
    if not (workdir / "state.json").exists():
        print("no test cluster in .cluster/: run `make cluster-up` first", file=sys.stderr)
        return 2
    images = built_images()
    cluster = Cluster.load(workdir)
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    cluster.kubectl("apply", "-f", "-", input=json.dumps(namespace))
    existing = cluster.kubectl("get", "pv", "-o", "name").stdout.split()
    objs = [
        o
        for o in storage(workdir / "volumes")
        if f"persistentvolume/{o['metadata']['name']}" not in existing
    ]
    if objs:
        cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objs))
    path = workdir / "values.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump(values(images), sort_keys=False))
    helm = _build.build_helm()
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    done = subprocess.run(
        [str(helm), "upgrade", "--install", RELEASE, str(ROOT / "helm" / "aviflow"),
         "-n", NAMESPACE, "-f", str(path), "--wait", "--timeout", "10m"],
        env=env, check=False,
    )  # fmt: skip
    if done.returncode:
        return done.returncode
    ip = ""
    for _ in range(60):
        svc = json.loads(
            cluster.kubectl(
                "get", "svc", f"{RELEASE}-proxy-public", "-n", NAMESPACE, "-o", "json"
            ).stdout
        )
        ip = ((svc.get("status", {}).get("loadBalancer", {}).get("ingress") or [{}])[0]).get(
            "ip", ""
        )
        if ip:
            break
        time.sleep(1)
    # the hub (rolled by an upgrade whose config changed) answers before the address is given
    for _ in range(180):
        try:
            with urllib.request.urlopen(f"http://{ip}/hub/health", timeout=5):
                break
        except OSError:
            time.sleep(1)
    kubectl = shutil.which("kubectl") or str(_build.bin_dir() / "kubectl")
    print(
        f"\nAviflow is at http://{ip}/: log in as alice (team vision) or bob (team nlp) with "
        f"password {PASSWORD}, or as admin with {ADMIN_PASSWORD} (usage report at "
        f"http://{ip}/services/aviflow-api/report)\n"
        f"values: {path} (edit, then `make cluster-chart` again to upgrade)\n"
        f"export KUBECONFIG={cluster.kubeconfig}\n"
        f"{kubectl} get pods,trainjobs,workloads -n {RELEASE}-vision   # team vision's jobs\n"
        f"{kubectl} get pods -n {RELEASE}-notebooks   # users' notebooks"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
