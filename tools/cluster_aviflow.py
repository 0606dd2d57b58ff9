"""``make cluster-aviflow``: Aviflow on the running test cluster (``make cluster-up`` first).

Applies the TrainJob CRD, a namespace ``aviflow`` with Kueue queues (a Topology and a
ResourceFlavor over the fake HGX nodes; teams ``default`` with 8 GPUs and ``research`` with
4 in one cohort), the run-store volume over ``.cluster/runs``, writes the cluster settings to
``.cluster/aviflow.yaml``, then runs the TrainJob controller in the foreground (Ctrl-C stops
it). In another shell::

    export KUBECONFIG=$PWD/.cluster/kubeconfig AVIFLOW_BACKEND=kubernetes
    export AVIFLOW_K8S_CONFIG=$PWD/.cluster/aviflow.yaml
    .venv/bin/aviflow submit job.yaml --wait
    kubectl get trainjobs,jobs,pods,workloads -n aviflow
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / d) for d in ("cluster", "k8s", "images")]

from aviflow_pool import pool_objects, run_store_volume  # noqa: E402

from aviflow.k8s.crd import committed  # noqa: E402
from aviflow.operator.__main__ import main as operator_main  # noqa: E402
from aviflow_testcluster import Cluster  # noqa: E402

NAMESPACE = "aviflow"
TEAMS = {
    "default": {"gpus": 8, "cohort": "hgx"},
    "research": {"gpus": 4, "cohort": "hgx", "borrow": 4},
}


def main() -> int:
    workdir = ROOT / ".cluster"
    if not (workdir / "state.json").exists():
        print("no test cluster in .cluster/: run `make cluster-up` first", file=sys.stderr)
        return 2
    cluster = Cluster.load(workdir)
    runs = workdir / "runs"
    runs.mkdir(exist_ok=True)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=committed())
    cluster.kubectl("wait", "--for=condition=Established", "crd/trainjobs.aviflow.dev")
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    objects = [namespace, *pool_objects("demo", NAMESPACE, TEAMS)]
    objects += run_store_volume(NAMESPACE, str(runs), "demo-aviflow-runs")
    cluster.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(o) for o in objects))
    settings = workdir / "aviflow.yaml"
    section: dict[str, object] = {"namespace": NAMESPACE, "runs": {"localPath": str(runs)}}
    built = ROOT / "images" / ".build" / "trainer-images.yaml"
    if built.exists():  # make images: pods run in the trainer image, as uid 1000
        section["images"] = yaml.safe_load(built.read_text())["images"]
    else:  # pods run on this machine's Python (the cluster is up in host mode)
        section.update(python=sys.executable, image="aviflow/trainer:dev")
        print("no trainer image built (make images): pods run on this machine's Python")
    settings.write_text(json.dumps(section, indent=2))
    print(f"namespace {NAMESPACE}: LocalQueues {', '.join(TEAMS)}; settings in {settings}")
    print(
        f"export KUBECONFIG={cluster.kubeconfig} AVIFLOW_BACKEND=kubernetes AVIFLOW_K8S_CONFIG={settings}"
    )
    print("controller running; Ctrl-C stops it", flush=True)
    return operator_main(["--settings", str(settings), "--kubeconfig", str(cluster.kubeconfig)])


if __name__ == "__main__":
    sys.exit(main())
