"""The pure builders of a job's cluster objects: golden files, the properties the issue asks
for, and a real API server (with Kueue's webhooks) accepting every rendered object.

Regenerate the golden files after an intended change with
``AVIFLOW_UPDATE_GOLDEN=1 pytest tests/k8s/test_manifests.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow.errors import BackendError
from aviflow.k8s import manifests as m
from aviflow.k8s.settings import ClusterSettings
from aviflow.spec import TrainJob

GOLDEN = Path(__file__).parent / "golden"
UID = "6f1c2a7e-0000-4000-8000-000000000001"

BIG = TrainJob.from_dict(
    {
        "metadata": {"name": "llama ft", "labels": {"project": "llm"}},
        "spec": {
            "queue": "vision",
            "nodes": 2,
            "gpusPerNode": 8,
            "cpuPerNode": 96,
            "memoryPerNode": "1536Gi",
            "script": "print('hi')\n",
            "env": {"HF_HOME": "/data/hf"},
            "timeLimit": "4h",
            "resumeFrom": {"job": "llama-0a1b2c3d", "step": 400},
        },
    }
)
SMALL = TrainJob.from_dict(
    {"metadata": {"name": "tiny"}, "spec": {"command": ["python", "-c", "print(1)"]}}
)
BIG_REF = m.JobRef("llama-ft---1e2d3c4b-5a6b7c8d", UID, "ada", team="vision")
SMALL_REF = m.JobRef("tiny-0badcafe", UID, "bob")
SETTINGS = ClusterSettings.from_dict(
    {
        "namespace": "ml-jobs",
        "image": "registry.example.com/aviflow/trainer:1.0",
        "priorityClass": "batch",
        "egress": [{"cidr": "10.20.0.0/16", "ports": [443]}, {"cidr": "0.0.0.0/0"}],
        "rankLogCap": "1Gi",
    }
)
DEFAULTS = ClusterSettings.from_dict(
    {
        "image": "aviflow/trainer:0.1.0",
        "cpuPerGpu": 12,
        "memoryPerGpu": "96Gi",
        "topology": {"required": None, "preferred": "topology.aviflow.dev/rack"},
    }
)


def rendered() -> dict[str, list[dict[str, Any]]]:
    return {
        "big.yaml": [
            m.trainjob(BIG, BIG_REF, "ada@example.com", SETTINGS),
            m.service(BIG_REF, SETTINGS),
            m.network_policy(BIG_REF, SETTINGS),
            m.attempt_job(
                BIG,
                BIG_REF,
                3,
                SETTINGS,
                deadline_seconds=5400,
                resume_subpath="ada/llama-0a1b2c3d/checkpoints/step-000000400",
            ),
        ],
        "small.yaml": [
            m.trainjob(SMALL, SMALL_REF, "bob", DEFAULTS),  # one node: no Service
            m.network_policy(SMALL_REF, DEFAULTS),
            m.attempt_job(SMALL, SMALL_REF, 1, DEFAULTS),
        ],
    }


@pytest.mark.parametrize("name", ["big.yaml", "small.yaml"])
def test_rendered_objects_match_the_golden_files(name: str) -> None:
    text = yaml.safe_dump_all(rendered()[name], sort_keys=True)
    path = GOLDEN / name
    if os.environ.get("AVIFLOW_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"rerun with AVIFLOW_UPDATE_GOLDEN=1 if intended ({path})"


def test_the_attempt_job_is_one_gang_of_gpu_pods_with_its_own_store_directory() -> None:
    job = m.attempt_job(
        BIG, BIG_REF, 3, SETTINGS, deadline_seconds=5400, resume_subpath="ada/x/checkpoints/s"
    )
    spec, pod = job["spec"], job["spec"]["template"]["spec"]
    (trainer,) = pod["containers"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert (spec["backoffLimit"], spec["suspend"], spec["activeDeadlineSeconds"]) == (0, True, 5400)
    assert pod["restartPolicy"] == "Never" and pod["automountServiceAccountToken"] is False
    # Pod Security `restricted`, and a read-only root: /tmp and $HOME are emptyDirs
    assert trainer["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
    }
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    scratch = {v["name"] for v in pod["volumes"] if v.get("emptyDir") == {}}
    assert sorted(
        (mt["mountPath"], mt["name"]) for mt in trainer["volumeMounts"] if mt["name"] in scratch
    ) == [("/home/aviflow", "scratch-1"), ("/tmp", "scratch-0")]
    assert trainer["resources"]["limits"] == {
        "nvidia.com/gpu": "8",
        "cpu": "96",
        "memory": "1536Gi",
    }
    assert job["metadata"]["labels"][m.QUEUE_LABEL] == "vision"
    assert job["metadata"]["labels"][m.PRIORITY_LABEL] == "batch"
    assert job["metadata"]["ownerReferences"][0]["uid"] == UID
    assert pod["subdomain"] == "avf-" + BIG_REF.id
    assert env["AVIFLOW_MAIN_ADDR"] == f"{BIG_REF.id}-a3-0.avf-{BIG_REF.id}"
    assert env["AVIFLOW_RUN_DIR"] == f"/aviflow/runs/ada/{BIG_REF.id}"
    assert (env["AVIFLOW_ATTEMPT"], env["AVIFLOW_NUM_NODES"], env["AVIFLOW_LOG_TO_STORE"]) == (
        "3",
        "2",
        "0",
    )
    assert "AVIFLOW_NODE_RANK" not in env  # JOB_COMPLETION_INDEX gives it
    mounts = {v["mountPath"]: v for v in trainer["volumeMounts"]}
    # the job's data part read-write, its code read-only, its control part not at all
    run_dir = f"/aviflow/runs/ada/{BIG_REF.id}"
    assert mounts[f"{run_dir}/data"] == {
        "name": "runs",
        "mountPath": f"{run_dir}/data",
        "subPath": f"ada/{BIG_REF.id}/data",
    }
    assert mounts[f"{run_dir}/code"] == {
        "name": "runs",
        "mountPath": f"{run_dir}/code",
        "subPath": f"ada/{BIG_REF.id}/code",
        "readOnly": True,
    }
    assert [m["mountPath"] for m in trainer["volumeMounts"] if m["name"] == "runs"] == [
        f"{run_dir}/data",
        f"{run_dir}/code",
        "/aviflow/resume",
    ]
    assert mounts["/aviflow/resume"] == {
        "name": "runs",
        "mountPath": "/aviflow/resume",
        "subPath": "ada/x/checkpoints/s",
        "readOnly": True,
    }
    assert env["AVIFLOW_RESUME_DIR"] == "/aviflow/resume"
    assert {v["name"]: v for v in pod["volumes"]}["shm"]["emptyDir"] == {
        "medium": "Memory",
        "sizeLimit": "64Gi",
    }
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations == {m.TAS_REQUIRED: "topology.aviflow.dev/block"}


def test_requests_default_per_gpu_from_the_settings() -> None:
    job = m.attempt_job(SMALL, SMALL_REF, 1, DEFAULTS)
    (trainer,) = job["spec"]["template"]["spec"]["containers"]
    assert trainer["resources"]["requests"] == {
        "nvidia.com/gpu": "1",
        "cpu": "12",
        "memory": "96Gi",
    }
    assert "activeDeadlineSeconds" not in job["spec"]


def test_trainer_pods_are_guaranteed_by_default() -> None:
    """With no per-GPU amounts set, a trainer holds 16 CPUs and 192 GiB per GPU, requests
    equal to limits (Guaranteed QoS); a spec's own amount wins; null drops the amount."""
    two = TrainJob.from_dict(
        {"metadata": {"name": "two"}, "spec": {"gpusPerNode": 2, "command": ["true"]}}
    )
    plain = ClusterSettings.from_dict({"image": "t:1"})
    (trainer,) = m.attempt_job(two, SMALL_REF, 1, plain)["spec"]["template"]["spec"]["containers"]
    amounts = {"nvidia.com/gpu": "2", "cpu": "32", "memory": "384Gi"}
    assert trainer["resources"] == {"requests": amounts, "limits": amounts}
    own = TrainJob.from_dict(
        {"metadata": {"name": "own"}, "spec": {"cpuPerNode": 4, "command": ["true"]}}
    )
    (trainer,) = m.attempt_job(own, SMALL_REF, 1, plain)["spec"]["template"]["spec"]["containers"]
    assert trainer["resources"]["limits"] == {"nvidia.com/gpu": "1", "cpu": "4", "memory": "192Gi"}
    bare = ClusterSettings.from_dict({"image": "t:1", "cpuPerGpu": None, "memoryPerGpu": None})
    (trainer,) = m.attempt_job(two, SMALL_REF, 1, bare)["spec"]["template"]["spec"]["containers"]
    assert trainer["resources"] == {
        "requests": {"nvidia.com/gpu": "2"},
        "limits": {"nvidia.com/gpu": "2"},
    }
    for key, bad in (("cpuPerGpu", "1.5"), ("cpuPerGpu", 0), ("memoryPerGpu", "lots")):
        with pytest.raises(BackendError, match=f"{key}: .* is not a whole-number quantity"):
            ClusterSettings.from_dict({key: bad})


def test_finished_attempts_are_deleted_after_the_admins_ttl() -> None:
    """Kubernetes deletes a finished attempt's Job and pods after ``finishedTtlSeconds``
    (default an hour: its end and usage are recorded long before); null keeps them."""
    assert m.attempt_job(SMALL, SMALL_REF, 1, DEFAULTS)["spec"]["ttlSecondsAfterFinished"] == 3600
    keep = DEFAULTS.model_copy(update={"finished_ttl_seconds": None})
    assert "ttlSecondsAfterFinished" not in m.attempt_job(SMALL, SMALL_REF, 1, keep)["spec"]
    with pytest.raises(
        BackendError, match="finishedTtlSeconds: Input should be greater than or equal to 0"
    ):
        ClusterSettings.from_dict({"finishedTtlSeconds": -1})


def test_the_admins_log_cap_reaches_every_rank_as_its_share() -> None:
    """``rankLogCap`` is one job's rank logs together: each pod's runtime gets a rank's share
    (the cap over the job's GPUs, at least 64Ki); null leaves the logs uncapped."""

    def share(job: TrainJob, settings: ClusterSettings) -> str | None:
        (trainer,) = m.attempt_job(job, BIG_REF, 1, settings)["spec"]["template"]["spec"][
            "containers"
        ]
        return {e["name"]: e["value"] for e in trainer["env"]}.get("AVIFLOW_RANK_LOG_BYTES")

    assert share(BIG, SETTINGS) == str((1 << 30) // 16) == "67108864"  # 2 nodes x 8 GPUs
    assert share(SMALL, DEFAULTS) == str(8 << 30)  # the default: 8Gi, one rank
    tiny = SETTINGS.model_copy(update={"rank_log_cap": "128Ki"})
    assert share(BIG, tiny) == "65536"  # never below 64Ki a rank
    assert share(BIG, SETTINGS.model_copy(update={"rank_log_cap": None})) is None
    for bad, why in [("1Ki", "less than the least log cap"), ("5m", "not a number of bytes")]:
        with pytest.raises(BackendError, match=f"rankLogCap: '{bad}' is {why}"):
            ClusterSettings.from_dict({"rankLogCap": bad})


def test_the_port_is_stable_per_attempt_and_in_range() -> None:
    ports = {m.main_port(f"job-{i:04d}", 1) for i in range(200)}
    assert all(m.PORT_BASE <= p < m.PORT_BASE + m.PORT_SPAN for p in ports)
    assert len(ports) > 190 and m.main_port("a", 1) == m.main_port("a", 1)
    assert m.main_port("a", 1) != m.main_port("a", 2)


def test_bad_settings_are_refused_with_the_key() -> None:
    from aviflow.errors import BackendError

    with pytest.raises(BackendError, match="namspace: unknown key; did you mean 'namespace'"):
        ClusterSettings.from_dict({"namspace": "x"})
    with pytest.raises(BackendError, match="'Bad_NS' is not a namespace name"):
        ClusterSettings.from_dict({"namespace": "Bad_NS"})
    with pytest.raises(
        BackendError, match=r"give topology\.required or topology\.preferred, not both"
    ):
        ClusterSettings.from_dict({"topology": {"preferred": "topology.aviflow.dev/rack"}})
    with pytest.raises(BackendError) as refused:
        ClusterSettings.from_dict({"runs": {"mountPath": "runs"}})
    assert str(refused.value).endswith(
        "runs.mountPath: 'runs' is not a mount path (an absolute path without '..', not /)"
    )
    for bad in ("/dev/shm", "/dev/shm/", "/", "tmp", "/tmp/../etc"):
        with pytest.raises(BackendError) as refused:
            ClusterSettings.from_dict({"scratch": ["/tmp", bad]})
        assert str(refused.value).endswith(
            f"scratch: {bad!r} is not a mount path (an absolute path without '..', not / or "
            "/dev/shm)"
        )
    with pytest.raises(BackendError, match="a scratch directory is named twice"):
        ClusterSettings.from_dict({"scratch": ["/tmp", "/tmp/"]})


@pytest.mark.cluster
def test_every_rendered_object_is_accepted_by_the_api_server(
    crd_installed: Any, k8s_namespace: str
) -> None:
    cluster = crd_installed
    for name, objects in rendered().items():
        for obj in objects:
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["namespace"] = k8s_namespace
            done = cluster.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-",
                input=json.dumps(obj), check=False,
            )  # fmt: skip
            assert done.returncode == 0, f"{name} {obj['kind']}: {done.stderr}"
            stored = json.loads(done.stdout)
            assert stored["metadata"]["name"] == obj["metadata"]["name"]
            if obj["kind"] == "Job":  # Kueue's webhook saw it and kept it suspended
                assert stored["spec"]["suspend"] is True
                assert stored["metadata"]["labels"][m.QUEUE_LABEL] == obj["spec"]["template"][
                    "metadata"
                ]["labels"].get(m.QUEUE_LABEL, obj["metadata"]["labels"][m.QUEUE_LABEL])


def test_cli_dry_run_prints_the_exact_manifests_and_submits_nothing(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    from aviflow.cli import main

    settings = tmp_path / "cluster.yaml"
    settings.write_text(
        yaml.safe_dump({"namespace": "ml-jobs", "runs": {"localPath": str(tmp_path / "runs")}})
    )
    monkeypatch.setenv("AVIFLOW_K8S_CONFIG", str(settings))
    spec = tmp_path / "job.yaml"
    spec.write_text(BIG.to_yaml())
    # no trainer image configured: refused, naming the setting
    assert main(["--backend", "kubernetes", "submit", str(spec), "--dry-run"]) == 2
    assert "no trainer image is configured" in capsys.readouterr().err
    settings.write_text(
        yaml.safe_dump(
            {
                "namespace": "ml-jobs",
                "image": "reg.example.com/trainer:1",
                "runs": {"localPath": str(tmp_path / "runs")},
            }
        )
    )
    assert main(["--backend", "kubernetes", "submit", str(spec), "--dry-run"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["TrainJob", "Service", "NetworkPolicy", "Job"]
    assert {d["metadata"]["namespace"] for d in docs} == {"ml-jobs"}
    assert docs[3]["spec"]["activeDeadlineSeconds"] == 4 * 3600
    assert docs[3]["spec"]["template"]["spec"]["containers"][0]["image"] == (
        "reg.example.com/trainer:1"
    )
    assert not (tmp_path / "runs").exists()


def test_a_jobs_network_policy_admits_its_own_pods_only_and_never_the_metadata() -> None:
    policy = m.network_policy(BIG_REF, SETTINGS)
    spec = policy["spec"]
    own = {"podSelector": {"matchLabels": {m.LABEL_JOB: BIG_REF.id}}}
    assert (policy["metadata"]["name"], policy["metadata"]["ownerReferences"][0]["uid"]) == (
        m.service_name(BIG_REF.id),
        UID,
    )
    assert spec["podSelector"] == own["podSelector"]
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == [{"from": [own]}]
    assert [e["to"] for e in spec["egress"]] == [
        [own],
        [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}}}],
        [{"ipBlock": {"cidr": "10.20.0.0/16"}}],
        [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}}],
    ]
    assert spec["egress"][2]["ports"] == [{"protocol": "TCP", "port": 443}]
    assert "ports" not in spec["egress"][3]
    # the admin's list is checked: a bad range or port is named
    with pytest.raises(BackendError, match="not an address range"):
        ClusterSettings.from_dict({"egress": [{"cidr": "10.0.0.1/8"}]})
    with pytest.raises(BackendError, match=r"ports \[0\] are not TCP ports"):
        ClusterSettings.from_dict({"egress": [{"cidr": "10.0.0.0/8", "ports": [0]}]})


def test_each_queue_runs_in_its_teams_namespace(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    """With ``queueNamespaces`` a job's objects go to its queue's team namespace, the
    controller watches each of those, and a queue no team has is refused, naming theirs."""
    from aviflow.cli import main
    from aviflow.errors import SpecError

    teams = {BIG.spec.queue: "team-vision", "research": "team-research"}
    s = ClusterSettings.from_dict({"namespace": "ml", "queueNamespaces": teams})
    assert s.job_namespaces() == ["team-research", "team-vision"]
    assert ClusterSettings.from_dict({"namespace": "ml"}).job_namespaces() == ["ml"]
    assert s.for_queue("vision").namespace == "team-vision" and s.namespace == "ml"
    with pytest.raises(SpecError, match="queue 'nlp' is no team's queue; use one of "):
        s.for_queue("nlp")
    with pytest.raises(BackendError, match="'Team_X' is not a namespace name"):
        ClusterSettings.from_dict({"queueNamespaces": {"x": "Team_X"}})
    settings = tmp_path / "cluster.yaml"
    settings.write_text(
        yaml.safe_dump(
            {
                "namespace": "ml",
                "queueNamespaces": teams,
                "image": "reg.example.com/trainer:1",
                "runs": {"localPath": str(tmp_path / "runs")},
            }
        )
    )
    monkeypatch.setenv("AVIFLOW_K8S_CONFIG", str(settings))
    spec = tmp_path / "job.yaml"
    spec.write_text(BIG.to_yaml())
    assert main(["--backend", "kubernetes", "submit", str(spec), "--dry-run"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["namespace"] for d in docs} == {"team-vision"}
    # --secret adds to spec.secrets: the ranks get each Secret's keys, by name only
    assert (
        main(["--backend", "kubernetes", "submit", str(spec), "--dry-run", "--secret", "hf"]) == 0
    )
    [tj, *_, attempt] = list(yaml.safe_load_all(capsys.readouterr().out))
    assert tj["spec"]["secrets"] == ["hf"]
    [container] = attempt["spec"]["template"]["spec"]["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "hf"}}]
    spec.write_text(BIG.with_changes(queue="nlp").to_yaml())
    assert main(["--backend", "kubernetes", "submit", str(spec), "--dry-run"]) == 2
    assert "queue 'nlp' is no team's queue; use one of " in capsys.readouterr().err
