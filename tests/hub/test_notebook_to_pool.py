"""The whole path on the test control plane: a KubeSpawner notebook pod on a CPU node runs
``%load_ext aviflow`` and a ``%%aviflow_train --nodes 2`` cell; the job goes through
aviflow-api (``api.backend: kubernetes``) into team a's LocalQueue, Kueue admits it, the
controller runs it as an Indexed Job on fake HGX nodes, and the notebook gets the loss
curve, the per-rank logs and the checkpoints back through aviflow-api.

The notebook pod runs in the built notebook image and the job's pods in the built trainer
image (both uid 1000); the trainer image is the first of the configured ``images``, and a
second entry with other pins shows the magic's version warning (``--dry-run``: nothing of it
is pulled). The hub, aviflow-api and the controller run on this machine (not as pods); see
the gaps in tests/cluster/README.md.
"""

from __future__ import annotations

import json
import uuid
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from aviflow_pool import home_storage
from kubernetes import client

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(1500)]

TINY = files("aviflow.examples").joinpath("tiny_regression.py").read_text()
CELL = f"""
%load_ext aviflow
get_ipython().run_cell_magic(
    "aviflow_train",
    "--nodes 2 --gpus-per-node 2 --name nb-to-pool --env TINY_STEPS=30 --env TINY_CKPT_EVERY=10 --out job --wait",
    {TINY!r},
)
rows = job.metric_rows()
print("backend", type(job.backend).__name__)
print("state", job.status.value)
print("queue", job.spec.spec.queue)
print("steps", len(rows), "falls", rows[-1]["loss"] < rows[0]["loss"])
print("checkpoints", [c.step for c in job.checkpoints()])
print("ranks", sorted(job.backend.ranks(job.id)))
print("rank3log", "=== attempt 1 rank 3" in job.logs(3))
print("id", job.id)
import re
panel = job.panel(); panel.poller.join(120)
chart = panel.chart.value
print("panel", panel.last.state.value, re.findall(r"data-metric='loss' data-points='(\\d+)'", chart))
loss = chart[chart.index("data-metric='loss'"):]
ys = [float(p.split(",")[1]) for p in re.search(r"<polyline [^>]* points='([^']+)'", loss).group(1).split()]
print("panelfalls", ys[-1] > ys[0])  # SVG y grows downwards: the curve ends lower than it starts
print("panelckpt", re.findall(r"class='aviflow-checkpoint' data-step='(\\d+)'", panel.checkpoints.table.value))
panel.logs.rank.value = 3
print("panellog", "=== attempt 1 rank 3" in panel.logs.text.value)
print("image", job.meta.image.name, job.meta.image.lock_hash)
print("imageIDs", [e.data.get("imageIDs") for e in job.events() if e.type.value == "RUNNING"])
dry = get_ipython().run_cell_magic(
    "aviflow_train", "--image older --dry-run --nodes 1 --gpus-per-node 1", "print(1)"
)
print("drywarn", " | ".join(line.strip() for line in dry.text().splitlines() if "image" in line))
from IPython.core.error import UsageError
try:
    get_ipython().run_cell_magic("aviflow_train", "--image nosuch --nodes 1 --gpus-per-node 1", "print(1)")
except UsageError as e:
    print("unknown", " ".join(str(e).split()))
print("jobs", len(job.backend.list_ids()))
"""


OLDER = {
    "name": "older",
    "image": "localhost/aviflow/trainer:0.0.9-000000000000",
    "lockHash": "000000000000",
    "packages": {"torch": "2.14.0", "accelerate": "1.14.0", "aviflow": "0.0.9"},
}


def test_a_notebook_cell_trains_on_the_hgx_pool_through_aviflow_api(
    make_pool: Any,
    hub_factory: Any,
    hub_config: Any,
    run_in_kernel: Any,
    tmp_path: Path,
    built_images: dict[str, dict[str, Any]],
    trainer_images: list[dict[str, Any]],
) -> None:
    notebook, trainer = built_images["notebook"], trainer_images[0]
    pool = make_pool({"queue-a": {"gpus": 8}, "queue-b": {"gpus": 4}})
    storage = f"aviflow-home-{uuid.uuid4().hex[:8]}"
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = hub_config()
    cfg = hub_config(
        hub={
            **base["hub"],
            "spawner": "kubernetes",
            "namespace": pool.namespace,
            "notebookPort": port,
            "notebookBind": "podIP",
        },
        profiles=[{**base["profiles"][0], "image": notebook["image"], "default": True}],
        storage={"capacity": "1Gi", "storageClass": storage, "mountPath": "/home/jovyan"},
        api={
            **base["api"],
            "backend": "kubernetes",
            "runRoot": str(pool.root),
            "kubernetes": {
                "namespace": pool.namespace,
                "kubeconfig": str(pool.cluster.kubeconfig),  # in a cluster: its service account
                "images": [trainer, OLDER],
            },
        },
    )
    del cfg["api"]["local"]
    with pool.cluster.api_client() as api:
        home_storage(api, storage, tmp_path / "pv")
        try:
            hub = hub_factory(cfg, env={"KUBECONFIG": str(pool.cluster.kubeconfig)})
            alice = hub.token("alice")
            hub.spawn("alice", alice, {"profile": "small"}, timeout=900)
            out, error = run_in_kernel(f"{hub.url}/user/alice/", alice, CELL, timeout=600)
            assert error is None, (error, out)
            lines = dict(line.split(" ", 1) for line in out.splitlines() if " " in line)
            assert lines.get("backend") == "HubBackend", out
            assert (lines["state"], lines["queue"]) == ("SUCCEEDED", "queue-a")
            assert lines["steps"] == "30 falls True"
            assert lines["checkpoints"] == "[10, 20, 30]"
            assert lines["ranks"] == "[0, 1, 2, 3]" and lines["rank3log"] == "True"
            job_id = lines["id"]
            # the panel in that notebook shows the loss curve, the checkpoints and rank 3's log
            assert lines["panel"] == "SUCCEEDED ['30']", out
            assert lines["panelfalls"] == "True", out
            assert lines["panelckpt"] == "['10', '20', '30']", out
            assert lines["panellog"] == "True", out
            # it ran in the trainer image it recorded; the notebook's versions match it
            assert lines["image"] == f"{trainer['name']} {trainer['lockHash']}", out
            assert lines["imageIDs"] == f"[['{built_images['trainer']['digest']}']]", out
            assert "warning:" not in out.split("drywarn")[0], out
            # another configured image with other pins: the magic names each difference
            assert lines["drywarn"] == (
                "warning: this notebook's packages differ from trainer image older "
                "(localhost/aviflow/trainer:0.0.9-000000000000, lock 000000000000): | "
                "torch 2.15.0 here, 2.14.0 in the image | "
                "accelerate 1.15.0 here, 1.14.0 in the image | "
                "aviflow 0.1.0 here, 0.0.9 in the image | "
                "the job runs with the image's versions; install those here (pip install "
                "torch==2.14.0 accelerate==1.14.0 aviflow==0.0.9) or pick another image with "
                "--image | image: older"  # (the spec it shows)
            ), out
            # an image not in the list is refused by aviflow-api, naming the choices; nothing
            # was created
            assert lines["unknown"] == (
                "SpecError: spec.image: 'nosuch' is not a configured trainer image; choose "
                f"one of: {trainer['name']} ({trainer['image']}, lock {trainer['lockHash']}), "
                "older (localhost/aviflow/trainer:0.0.9-000000000000, lock 000000000000); "
                "nothing was submitted"
            ), out
            assert lines["jobs"] == "1", out
            # it ran as a TrainJob in team a's LocalQueue, admitted by Kueue, on HGX nodes
            cr = json.loads(
                pool.cluster.kubectl(
                    "get", "trainjob", job_id, "-n", pool.namespace, "-o", "json"
                ).stdout
            )
            assert cr["spec"]["queue"] == "queue-a" and cr["status"]["state"] == "SUCCEEDED"
            assert cr["metadata"]["annotations"]["aviflow.dev/user"] == "alice"
            pods = json.loads(
                pool.cluster.kubectl(
                    "get",
                    "pods",
                    "-n",
                    pool.namespace,
                    "-l",
                    f"aviflow.dev/job={job_id}",
                    "-o",
                    "json",
                ).stdout
            )["items"]
            assert len(pods) == 2 and all(p["spec"]["nodeName"].startswith("hgx-") for p in pods)
            # the ledger of aviflow-api recorded the run: one admission of 4 GPUs for team a
            usage = hub.call("GET", "usage", alice)
            assert usage.status_code == 200, usage.text
            [row] = usage.json()["rows"]
            assert (row["key"], row["jobs"], row["attempts"], row["preemptions"]) == (
                "team-a",
                1,
                1,
                0,
            )
            assert 4 * 5 < row["gpu_seconds"] < 4 * 300, row
            hub.stop_server("alice", alice)
        finally:
            for delete in (
                client.CoreV1Api(api).delete_persistent_volume,
                client.StorageV1Api(api).delete_storage_class,
            ):
                try:
                    delete(storage)
                except client.ApiException:
                    pass
