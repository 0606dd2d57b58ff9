"""Training runtimes (``api.kubernetes.runtimes``): what an admin's runtime adds to a job's
pods (golden file, exact fields), that a spec only names one, that a name the cluster does
not have is refused before anything is written, that bad settings are refused by name, and,
on the test control plane, that the API server stores the rendered Job as built and Pod
Security decides on its pods as :meth:`TrainingRuntime.pod_security` says.

Regenerate the golden file after an intended change with
``AVIFLOW_UPDATE_GOLDEN=1 pytest tests/k8s/test_runtimes.py``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from aviflow.errors import BackendError, SpecError
from aviflow.k8s import manifests as m
from aviflow.k8s.crd import committed
from aviflow.k8s.runtimes import CAPABILITY_LEVEL, TrainingRuntime
from aviflow.k8s.settings import ClusterSettings
from aviflow.spec import TrainJob
from aviflow_testcluster import RESTRICTED

GOLDEN = Path(__file__).parent / "golden" / "runtime.yaml"
REF = m.JobRef("ft-0badcafe", "6f1c2a7e-0000-4000-8000-000000000002", "ada", team="vision")
HF = {
    "description": "Shared Hugging Face cache",
    "env": {"HF_HOME": "/cache/huggingface"},
    "volumes": [{"name": "hf", "claimName": "hf-cache", "mountPath": "/cache/huggingface"}],
}
IB = {
    "resources": {"rdma/hca_shared_devices_a": 1, "nvidia.com/hostdev": 2},
    "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-net"},
    "env": {"NCCL_IB_HCA": "mlx5", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_DEBUG": "INFO"},
    "capabilities": ["IPC_LOCK"],
    "hostNetwork": True,
    "nodeSelector": {"network.aviflow.dev/fabric": "infiniband"},
    "tolerations": [{"key": "rdma", "operator": "Exists", "effect": "NoSchedule"}],
    "volumes": [
        {
            "name": "models",
            "claimName": "hf-cache",
            "mountPath": "/cache/huggingface",
            "subPath": "hub",
            "readOnly": True,
        }
    ],
}
SETTINGS = ClusterSettings.from_dict(
    {
        "namespace": "team-vision",
        "image": "registry.example.com/aviflow/trainer:1.0",
        "podSecurity": "privileged",
        "runtimes": {"hf-cache": HF, "infiniband": IB},
        "defaultRuntime": "hf-cache",
    }
)


def job(runtime: str | None = None, **spec: Any) -> TrainJob:
    body = {"queue": "vision", "nodes": 2, "command": ["python", "train.py"], **spec}
    if runtime is not None:
        body["runtime"] = runtime
    return TrainJob.from_dict({"metadata": {"name": "ft"}, "spec": body})


def pod(rendered: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """The pod template's metadata, spec and trainer container of an attempt Job."""
    template = rendered["spec"]["template"]
    (trainer,) = template["spec"]["containers"]
    return template["metadata"], template["spec"], trainer


def test_the_rendered_jobs_match_the_golden_file() -> None:
    docs = [
        m.attempt_job(job(), REF, 1, SETTINGS),
        m.attempt_job(job("infiniband"), REF, 2, SETTINGS),
    ]
    text = yaml.safe_dump_all(docs, sort_keys=True)
    if os.environ.get("AVIFLOW_UPDATE_GOLDEN") == "1":
        GOLDEN.write_text(text)
    assert text == GOLDEN.read_text(), f"rerun with AVIFLOW_UPDATE_GOLDEN=1 if intended ({GOLDEN})"


def test_a_runtime_reaches_the_pod_and_adds_to_aviflows_own() -> None:
    plain = ClusterSettings.from_dict({"namespace": "team-vision", "image": SETTINGS.image})
    base_meta, base_spec, base = pod(m.attempt_job(job(), REF, 2, plain))
    meta, spec, trainer = pod(m.attempt_job(job("infiniband"), REF, 2, SETTINGS))
    assert meta["annotations"] == {
        **base_meta["annotations"],
        "k8s.v1.cni.cncf.io/networks": "ib-net",
        "aviflow.dev/runtime": "infiniband",
    }
    extra = {"rdma/hca_shared_devices_a": "1", "nvidia.com/hostdev": "2"}
    assert trainer["resources"] == {
        "requests": {**base["resources"]["requests"], **extra},
        "limits": {**base["resources"]["limits"], **extra},
    }
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env == {
        **{e["name"]: e["value"] for e in base["env"]},
        "NCCL_IB_HCA": "mlx5",
        "NCCL_SOCKET_IFNAME": "eth0",
        "NCCL_DEBUG": "INFO",
    }
    assert [e["name"] for e in trainer["env"]] == sorted(env)
    assert trainer["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
        "readOnlyRootFilesystem": True,
    }
    assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
    assert spec["nodeSelector"] == {
        "aviflow.dev/node-pool": "hgx",
        "network.aviflow.dev/fabric": "infiniband",
    }
    assert spec["tolerations"] == [
        *base_spec["tolerations"],
        {"key": "rdma", "operator": "Exists", "effect": "NoSchedule"},
    ]
    assert spec["volumes"] == [
        *base_spec["volumes"],
        {"name": "rt-models", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": True}},
    ]
    assert trainer["volumeMounts"] == [
        *base["volumeMounts"],
        {
            "name": "rt-models",
            "mountPath": "/cache/huggingface",
            "subPath": "hub",
            "readOnly": True,
        },
    ]
    # the rest of the pod is Aviflow's as it was
    changed = {"hostNetwork", "dnsPolicy", "nodeSelector", "tolerations", "volumes", "containers"}
    assert {k: v for k, v in spec.items() if k not in changed} == {
        k: v for k, v in base_spec.items() if k not in changed
    }


def test_the_default_runtime_applies_and_none_leaves_the_pod_as_it_was() -> None:
    _, spec, trainer = pod(m.attempt_job(job(), REF, 1, SETTINGS))
    assert {e["name"]: e["value"] for e in trainer["env"]}["HF_HOME"] == "/cache/huggingface"
    assert spec["volumes"][-1] == {
        "name": "rt-hf",
        "persistentVolumeClaim": {"claimName": "hf-cache"},
    }
    assert "hostNetwork" not in spec and trainer["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    # without runtimes the builder renders exactly what it rendered before they existed
    plain = ClusterSettings.from_dict({"namespace": "team-vision", "image": SETTINGS.image})
    none = SETTINGS.model_copy(update={"default_runtime": None})
    assert m.attempt_job(job(), REF, 1, none) == m.attempt_job(job(), REF, 1, plain)
    meta, _, _ = pod(m.attempt_job(job(), REF, 1, plain))
    assert "aviflow.dev/runtime" not in meta["annotations"]


def test_a_spec_names_a_runtime_and_nothing_else() -> None:
    """Capabilities, the host network, devices and volumes are a runtime's: the spec has no
    key for them (the CRD, generated from the model, neither), and its env cannot be the
    runtime's own variables."""
    for key, value in [
        ("hostNetwork", True),
        ("capabilities", ["IPC_LOCK"]),
        ("securityContext", {"privileged": True}),
        ("resources", {"rdma/hca_shared_devices_a": 1}),
        ("volumes", [{"name": "x", "hostPath": {"path": "/"}}]),
    ]:
        with pytest.raises(SpecError, match=f"spec.{key}: unknown key"):
            job(**{key: value})
    with pytest.raises(SpecError, match="'IB' is not a runtime name"):
        job("IB")
    crd = yaml.safe_load(committed())
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert not {"hostNetwork", "capabilities", "securityContext", "volumes"} & set(
        spec_schema["properties"]
    )
    assert spec_schema["properties"]["runtime"]["pattern"] == "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
    assert "x-kubernetes-preserve-unknown-fields" not in spec_schema


def test_an_unknown_runtime_is_refused_at_submission_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    from aviflow.backends.kubernetes import KubernetesBackend
    from aviflow.bundle import build_bundle

    runs = tmp_path / "runs"
    settings = SETTINGS.model_copy(
        update={"runs": SETTINGS.runs.model_copy(update={"local_path": str(runs)})}
    )
    backend = KubernetesBackend(settings, api=object())  # refused before any call
    bad = job("infiniband2")
    with pytest.raises(SpecError) as refused:
        backend.submit(bad, build_bundle(bad, base_dir=tmp_path))
    assert str(refused.value) == (
        "invalid TrainJob spec: spec.runtime: 'infiniband2' is not a training runtime of this cluster; use one of: "
        "hf-cache, infiniband (an admin sets api.kubernetes.runtimes)"
    )
    assert not runs.exists() or list(runs.rglob("*")) == []
    bare = ClusterSettings.from_dict({"image": "t:1"})
    with pytest.raises(SpecError, match="use one of: none are configured"):
        bare.pin_runtime(job("hf-cache"))
    # the default is pinned into the job: a later defaultRuntime does not change it
    assert SETTINGS.pin_runtime(job()).spec.runtime == "hf-cache"
    assert SETTINGS.pin_runtime(job("infiniband")).spec.runtime == "infiniband"
    assert bare.pin_runtime(job()).spec.runtime is None


def test_the_local_backend_refuses_a_runtime_before_anything_is_written(local_backend: Any) -> None:
    from aviflow.bundle import build_bundle

    ib = job("infiniband", nodes=1)
    with pytest.raises(BackendError) as refused:
        local_backend.submit(ib, build_bundle(ib))
    assert str(refused.value) == (
        "spec.runtime (infiniband) is a training runtime of a cluster (its devices, network "
        "and volumes); this local backend has none: drop it to run here, or submit to the cluster"
    )
    assert local_backend.list_ids() == []


def test_cli_dry_run_shows_the_runtime_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    from aviflow.cli import main

    settings = tmp_path / "cluster.yaml"
    runs = {"localPath": str(tmp_path / "runs")}
    settings.write_text(
        yaml.safe_dump({**SETTINGS.model_dump(by_alias=True, exclude={"runs"}), "runs": runs})
    )
    monkeypatch.setenv("AVIFLOW_K8S_CONFIG", str(settings))
    spec = tmp_path / "job.yaml"
    spec.write_text(job().to_yaml())
    argv = ["--backend", "kubernetes", "submit", str(spec), "--dry-run"]
    assert main([*argv, "--runtime", "infiniband", "--secret", "hf-token", "--secret", "a"]) == 0
    [tj, *_, attempt] = list(yaml.safe_load_all(capsys.readouterr().out))
    assert tj["spec"]["runtime"] == "infiniband"
    assert tj["spec"]["secrets"] == ["hf-token", "a"]
    assert (
        attempt["spec"]["template"]["metadata"]["annotations"]["aviflow.dev/runtime"]
        == "infiniband"
    )
    assert main([*argv, "--runtime", "roce"]) == 2
    assert "'roce' is not a training runtime of this cluster; use one of: hf-cache, infiniband" in (
        capsys.readouterr().err
    )
    assert not (tmp_path / "runs").exists()


def test_a_kubectl_trainjob_is_refused_for_an_unknown_runtime_and_pinned_otherwise(
    tmp_path: Path,
) -> None:
    """The controller adopts a TrainJob applied with kubectl as aviflow-api submits one: a
    runtime the cluster does not have is refused (the TrainJob says why), nothing written;
    none named becomes the default, pinned in the job's recorded spec."""
    from aviflow.operator._binding import Binder
    from aviflow.store import RunStore

    store = RunStore(tmp_path)
    refused: list[tuple[str, str]] = []
    binder = Binder(store, lambda cr, why: refused.append((cr["metadata"]["name"], why)), SETTINGS)

    def cr(name: str, **spec: Any) -> dict[str, Any]:
        body = {"queue": "vision", "command": ["python", "-c", "1"], **spec}
        meta = {"name": name, "namespace": "team-vision", "uid": f"u-{name}"}
        return {"apiVersion": "aviflow.dev/v1", "kind": "TrainJob", "metadata": meta, "spec": body}

    assert binder.adopt(cr("roce-0000beef", runtime="roce")) is None
    assert refused == [
        (
            "roce-0000beef",
            "invalid TrainJob spec: spec.runtime: 'roce' is not a training runtime of this "
            "cluster; use one of: hf-cache, infiniband (an admin sets api.kubernetes.runtimes)",
        )
    ]
    assert store.ids() == []
    run = binder.adopt(cr("plain-0000beef"))
    assert run is not None and run.spec().spec.runtime == "hf-cache"


def test_the_magic_option_names_the_runtime() -> None:
    from aviflow_magics._build import build_job
    from aviflow_magics._options import parse_train_options

    opts = parse_train_options("--runtime infiniband --nodes 2")
    assert opts.runtime == "infiniband"
    assert build_job(opts, "print(1)\n", default_name="nb").spec.runtime == "infiniband"


BAD: list[tuple[dict[str, Any], str]] = [
    (
        {"runtimes": {"ib": {"env": {"RANK": "1"}}}},
        "runtimes.ib.env: RANK is set by Aviflow's runtime",
    ),
    (
        {"runtimes": {"ib": {"env": {"AVIFLOW_RUN_DIR": "/x"}}}},
        "runtimes.ib.env: AVIFLOW_RUN_DIR is set by Aviflow's runtime",
    ),
    (
        {"runtimes": {"ib": {"env": {"NCCL-DEBUG": "INFO"}}}},
        "runtimes.ib.env: 'NCCL-DEBUG' is not a variable name",
    ),
    (
        {"runtimes": {"ib": {"capabilities": ["SYS_ADMIN"]}}},
        "runtimes.ib.capabilities.0: must be 'IPC_LOCK', 'SYS_RESOURCE', 'NET_RAW' or "
        "'NET_BIND_SERVICE', got 'SYS_ADMIN'",
    ),
    (
        {"runtimes": {"ib": {"resources": {"memory": 1}}}},
        "runtimes.ib.resources: 'memory' is not an extended resource name",
    ),
    (
        {"runtimes": {"ib": {"resources": {"rdma/ib": 0}}}},
        "runtimes.ib.resources: rdma/ib: 0 is not a whole number from 1 to 1024",
    ),
    (
        {"runtimes": {"ib": {"resources": {"nvidia.com/gpu": 1}}}},
        "runtimes.ib.resources: nvidia.com/gpu is the spec's (gpusPerNode)",
    ),
    (
        {"runtimes": {"ib": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "x"}}}},
        "runtimes.ib.annotations: 'kueue.x-k8s.io/podset-required-topology' is not a key a "
        "runtime may set",
    ),
    (
        {"runtimes": {"ib": {"hostNetwork": True}}},
        "runtimes.ib: hostNetwork need Pod Security privileged, and the jobs' namespaces "
        "enforce restricted (podSecurity): their pods would never be created. Set "
        "podSecurity: privileged (the chart labels the teams' namespaces so), or drop them "
        "from the runtime",
    ),
    (
        {"podSecurity": "baseline", "runtimes": {"ib": {"capabilities": ["IPC_LOCK"]}}},
        "runtimes.ib: capabilities IPC_LOCK need Pod Security privileged, and the jobs' "
        "namespaces enforce baseline",
    ),
    (
        {
            "runtimes": {
                "x": {"volumes": [{"name": "r", "claimName": "aviflow-runs", "mountPath": "/m"}]}
            }
        },
        "runtimes.x.volumes.r: aviflow-runs is the run store's claim",
    ),
    (
        {"runtimes": {"x": {"volumes": [{"name": "r", "claimName": "c", "mountPath": "/tmp"}]}}},
        "runtimes.x.volumes.r: mountPath /tmp overlaps /tmp, which Aviflow mounts itself",
    ),
    (
        {"runtimes": {"x": {"volumes": [{"name": "r", "claimName": "c", "mountPath": "/a/../"}]}}},
        "runtimes.x.volumes.0.mountPath: '/a/../' is not a mount path (an absolute path "
        "without '..', not /)",
    ),
    (
        {
            "runtimes": {
                "x": {"volumes": [{"name": "r", "claimName": "c", "mountPath": "/aviflow"}]}
            }
        },
        "runtimes.x.volumes.r: mountPath /aviflow overlaps /aviflow/runs",
    ),
    (
        {"runtimes": {"x": {"tolerations": [{"key": "a", "efect": "NoSchedule"}]}}},
        "runtimes.x.tolerations: a toleration has unknown keys ['efect']",
    ),
    ({"runtimes": {"Big": {}}}, "runtimes: 'Big' is not a runtime name"),
    ({"defaultRuntime": "hf"}, "defaultRuntime: 'hf' is none of runtimes (none configured)"),
    (
        {"runtimes": {"x": {"hostNetwrk": True}}},
        "runtimes.x.hostNetwrk: unknown key; did you mean 'hostNetwork'",
    ),
]


@pytest.mark.parametrize(("settings", "message"), BAD, ids=[b[1][:40] for b in BAD])
def test_bad_runtimes_are_refused_by_name(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(BackendError) as refused:
        ClusterSettings.from_dict(settings)
    assert message in str(refused.value)


def test_what_a_runtime_needs_of_pod_security() -> None:
    assert TrainingRuntime.model_validate(HF).pod_security() == "restricted"
    assert TrainingRuntime.model_validate({"capabilities": ["NET_BIND_SERVICE"]}).needs() == []
    ib = TrainingRuntime.model_validate(IB)
    assert (ib.pod_security(), ib.needs()) == (
        "privileged",
        ["capabilities IPC_LOCK", "hostNetwork"],
    )


def _pod_of(job_body: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A Pod as the Job controller makes it from the attempt Job's template."""
    template = json.loads(json.dumps(job_body["spec"]["template"]))
    template["metadata"]["name"] = job_body["metadata"]["name"] + "-0"
    template["metadata"]["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Pod", **template}


@pytest.mark.cluster
def test_the_api_server_keeps_the_runtime_and_pod_security_decides_as_computed(
    crd_installed: Any, tmp_path: Path
) -> None:
    """A server-side dry run in a namespace enforcing ``privileged`` stores the attempt Job
    with everything the runtime added; in one enforcing ``restricted`` (the default) Pod
    Security admits the pods of a runtime that needs restricted only and refuses the others,
    as the settings' check says; a TrainJob cannot carry a capability or the host network.
    A queued job whose runtime the admin removed since is FAILED by the controller once,
    naming it and those left, and nothing is created for it (Kueue admits nothing here)."""
    cluster = crd_installed
    privileged = cluster.create_namespace(
        labels={"pod-security.kubernetes.io/enforce": "privileged"}
    )
    restricted = cluster.create_namespace(labels=RESTRICTED)
    try:

        def dry_run(obj: dict[str, Any], namespace: str) -> Any:
            obj = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
            return cluster.kubectl(
                "create", "--dry-run=server", "-o", "json", "-f", "-",
                input=json.dumps(obj), check=False,
            )  # fmt: skip

        ib = m.attempt_job(job("infiniband"), REF, 1, SETTINGS)
        done = dry_run(ib, privileged)
        assert done.returncode == 0, done.stderr
        stored = json.loads(done.stdout)
        assert stored["spec"]["suspend"] is True  # Kueue's webhook holds it for its queue
        meta, spec, trainer = pod(stored)
        built_meta, built_spec, built = pod(ib)
        assert meta["annotations"] == built_meta["annotations"]
        assert trainer["resources"] == built["resources"]
        assert trainer["env"] == built["env"]
        assert trainer["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        assert trainer["volumeMounts"] == built["volumeMounts"]
        assert spec["volumes"] == built_spec["volumes"]
        assert (spec["hostNetwork"], spec["dnsPolicy"]) == (True, "ClusterFirstWithHostNet")
        for name, body in [
            ("hf-cache", m.attempt_job(job(), REF, 1, SETTINGS)),
            ("infiniband", ib),
        ]:
            level = SETTINGS.runtimes[name].pod_security()
            done = dry_run(_pod_of(body, restricted), restricted)
            assert (done.returncode == 0) is (level == "restricted"), (name, done.stderr)
            if level != "restricted":
                assert 'violates PodSecurity "restricted:latest": host namespaces' in done.stderr
                assert (
                    'unrestricted capabilities (container "trainer" must not include "IPC_LOCK" in '
                    "securityContext.capabilities.add)" in done.stderr
                )
            assert dry_run(_pod_of(body, privileged), privileged).returncode == 0
        # what the spec cannot say, the API server refuses too
        tj = m.trainjob(job("infiniband"), REF, "ada", SETTINGS)
        tj["spec"]["hostNetwork"] = True
        tj["spec"]["capabilities"] = ["SYS_ADMIN"]
        refused = dry_run(tj, restricted)
        assert refused.returncode != 0
        assert 'unknown field "spec.hostNetwork"' in refused.stderr
        assert 'unknown field "spec.capabilities"' in refused.stderr
        _a_removed_runtime_fails_the_job_once(cluster, restricted, tmp_path)
    finally:
        for ns in (privileged, restricted):
            cluster.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _a_removed_runtime_fails_the_job_once(cluster: Any, namespace: str, root: Path) -> None:
    """Submitted with the runtime hf-cache, then driven by a controller whose settings have
    no runtime any more (an admin removed it from api.kubernetes.runtimes)."""
    from aviflow_pool import Pool

    from aviflow.backends.kubernetes import KubernetesBackend
    from aviflow.bundle import build_bundle
    from aviflow.records import EventType, JobState
    from aviflow_testcluster import wait_for

    image = {"name": "trainer-none", "image": "aviflow/trainer:none"}  # no pod ever runs
    pool = Pool(cluster, namespace, root, {"vision": {"gpus": 0}}, [image])
    try:
        before = pool.settings.model_copy(update={"runtimes": {"hf-cache": TrainingRuntime()}})
        ft = job("hf-cache", nodes=1)
        job_id = KubernetesBackend(before, api=pool.api).submit(ft, build_bundle(ft, root))
        pool.start_controller()
        cr = ["get", "trainjob", job_id, "-n", namespace, "-o", "jsonpath={.status.state}"]
        wait_for(lambda: cluster.kubectl(*cr).stdout == "FAILED", 30, "the TrainJob FAILED")
        why = (
            "cannot start: its training runtime is gone: spec.runtime: 'hf-cache' is not a "
            "training runtime of this cluster; use one of: none are configured (an admin sets "
            "api.kubernetes.runtimes)"
        )
        cr[-1] = "jsonpath={.status.message}"
        assert cluster.kubectl(*cr).stdout == why
        run = pool.backend.run_dir(job_id)
        assert [(e.type, e.message) for e in run.events().items] == [
            (EventType.QUEUED, "waiting for admission"),
            (EventType.FAILED, why),
        ]
        assert run.status().state is JobState.FAILED
        assert pool.leftovers() == {
            k: []
            for k in ("jobs", "pods", "services", "networkpolicies", "workloads.kueue.x-k8s.io")
        }
    finally:
        pool.close()


def test_a_removed_runtime_is_named_with_those_left() -> None:
    """What the controller asks before it makes a queued job's next attempt."""
    submitted = SETTINGS.pin_runtime(job()).spec.runtime
    later = ClusterSettings.from_dict({"image": "t:1", "runtimes": {"infiniband": {}}})
    assert later.missing_runtime(submitted) == (
        "spec.runtime: 'hf-cache' is not a training runtime of this cluster; use one of: "
        "infiniband (an admin sets api.kubernetes.runtimes)"
    )
    assert later.missing_runtime("infiniband") is None
    assert SETTINGS.missing_runtime(None) is None  # the default, which is there
    bare = ClusterSettings.from_dict({"image": "t:1"})
    assert bare.missing_runtime(None) is None  # none named, none needed
    assert bare.missing_runtime("hf-cache") == (
        "spec.runtime: 'hf-cache' is not a training runtime of this cluster; use one of: "
        "none are configured (an admin sets api.kubernetes.runtimes)"
    )


def test_every_allowed_capability_has_a_level() -> None:
    from typing import get_args

    from aviflow.k8s.runtimes import Capability

    assert set(get_args(Capability)) == set(CAPABILITY_LEVEL)
