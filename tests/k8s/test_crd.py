"""The TrainJob CRD: generated from the spec model (golden), and enforced by a real API server.

The API-server half runs on the test control plane (``tests/cluster``): the CRD is applied
(idempotently; it stays for the session), then valid and invalid TrainJobs are applied with
``kubectl`` as a person would.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml

from aviflow.k8s.crd import (
    GROUP,
    IMMUTABLE_SPEC,
    NAME,
    PLURAL,
    VERSION,
    committed,
    render,
    spec_schema,
    trainjob_crd,
)
from aviflow.k8s.manifests import ANNOTATION_CANCEL
from aviflow.records import JobStatus
from aviflow.spec import TrainJob

VALID: dict[str, Any] = {
    "apiVersion": "aviflow.dev/v1",
    "kind": "TrainJob",
    "metadata": {"name": "tiny-regression"},
    "spec": {
        "queue": "vision",
        "nodes": 2,
        "gpusPerNode": 8,
        "cpuPerNode": 96,
        "memoryPerNode": "1536Gi",
        "script": "print('hi')\n",
        "env": {"HF_HOME": "/data/hf"},
        "accelerate": {"mixedPrecision": "bf16"},
        "timeLimit": "4h",
        "resumeFrom": {"job": "tiny-3f9a1c2b", "step": 40},
    },
}


def with_spec(**changes: Any) -> dict[str, Any]:
    job = copy.deepcopy(VALID)
    for key, value in changes.items():
        if value is None:
            job["spec"].pop(key, None)
        else:
            job["spec"][key] = value
    return job


def test_the_committed_crd_is_generated_from_the_spec_model() -> None:
    assert committed() == render(), (
        "run: python -m aviflow.k8s.crd > aviflow/k8s/trainjobs.aviflow.dev.yaml"
    )
    crd = yaml.safe_load(committed())
    version = crd["spec"]["versions"][0]
    assert (crd["metadata"]["name"], version["name"], crd["spec"]["names"]["shortNames"]) == (
        NAME,
        "v1",
        ["tj"],
    )
    assert version["subresources"] == {"status": {}}
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "State", "Queue", "Nodes", "GPUs/node", "Attempt", "Position", "Start", "Age"]  # fmt: skip


def test_the_schema_has_every_spec_key_and_the_models_limits() -> None:
    schema = spec_schema()
    assert set(schema["properties"]) == {
        f.alias or n for n, f in TrainJob.model_fields["spec"].annotation.model_fields.items()
    }  # type: ignore[union-attr]
    props = schema["properties"]
    assert (props["nodes"]["minimum"], props["nodes"]["maximum"]) == (1, 512)
    assert (props["gpusPerNode"]["minimum"], props["gpusPerNode"]["maximum"]) == (1, 8)
    assert props["accelerate"]["properties"]["mixedPrecision"]["enum"] == [
        "no",
        "fp16",
        "bf16",
        "fp8",
    ]
    assert props["cpuPerNode"]["x-kubernetes-int-or-string"] is True
    assert "anyOf" not in json.dumps(schema) and "$ref" not in json.dumps(schema)


def test_the_status_schema_has_the_job_status_keys() -> None:
    status = trainjob_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    from aviflow.estimate import Estimate, WaitNumbers
    from aviflow.records import FailureInfo, JobState

    full = JobStatus(
        JobState.FAILED, 2, "m", 1.0, 3, FailureInfo(1, 0, 1, "E", "m", "t", 1, "l", 1.0, 7),
        Estimate("j", 1.0, 2.0, "x", ("a",), now=True, expected=1.5),
        WaitNumbers("q", 1, 2, 3, 4, 5, 6),
    )  # fmt: skip
    wire = full.to_dict()
    assert set(status["properties"]) == set(wire)
    for key in ("failure", "expectedStart", "wait"):
        assert set(status["properties"][key]["properties"]) == set(wire[key]), key


def apply(cluster: Any, namespace: str, job: dict[str, Any]) -> Any:
    return cluster.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(job), check=False)


@pytest.mark.cluster
def test_kubectl_apply_of_a_valid_trainjob_works(crd_installed: Any, k8s_namespace: str) -> None:
    TrainJob.from_dict(VALID)  # valid for the model too
    done = apply(crd_installed, k8s_namespace, VALID)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "trainjob.aviflow.dev/tiny-regression created"
    stored = json.loads(
        crd_installed.kubectl(
            "get", "tj", "tiny-regression", "-n", k8s_namespace, "-o", "json"
        ).stdout
    )
    assert stored["spec"]["checkpoints"] == {"keepLast": 3}  # the model's defaults, applied
    assert stored["spec"]["maxRestarts"] == 0
    listed = crd_installed.kubectl("get", "trainjobs", "-n", k8s_namespace).stdout.splitlines()
    assert listed[0].split() == [
        "NAME",
        "STATE",
        "QUEUE",
        "NODES",
        "GPUS/NODE",
        "ATTEMPT",
        "POSITION",
        "START",
        "AGE",
    ]
    assert listed[1].split()[:4] == ["tiny-regression", "vision", "2", "8"]  # no status yet
    crd_installed.kubectl("delete", "tj", "tiny-regression", "-n", k8s_namespace)


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("job", "message"),
    [
        (with_spec(gpuPerNode=2), 'unknown field "spec.gpuPerNode"'),
        (
            with_spec(nodes=0),
            "spec.nodes: Invalid value: 0: spec.nodes in body should be greater than or equal to 1",
        ),
        (with_spec(gpusPerNode=9), "spec.gpusPerNode in body should be less than or equal to 8"),
        (
            with_spec(command=["python", "x.py"]),
            "give exactly one of script, scriptFile or command",
        ),
        (with_spec(script=None), "give exactly one of script, scriptFile or command"),
        (
            with_spec(script=None, scriptFile="../x.py"),
            "scriptFile climbs out of the spec's directory",
        ),
        (with_spec(queue="Vision"), "spec.queue in body should match"),
        (with_spec(env={"RANK": "3"}), "variables set by the Aviflow runtime cannot be overridden"),
        (with_spec(env={"1BAD": "3"}), "variable names are [A-Za-z_][A-Za-z0-9_]*"),
        (with_spec(memoryPerNode="lots"), "must be a quantity up to 64Ti"),
        (with_spec(memoryPerNode="65Ti"), "must be a quantity up to 64Ti"),
        (with_spec(cpuPerNode=2000), "must be a quantity from 1m to 1024 cores"),
        (with_spec(timeLimit="4 hours"), "spec.timeLimit in body should match"),
        (with_spec(accelerate={"mixedPrecision": "fp32"}), 'Unsupported value: "fp32"'),
        (with_spec(resumeFrom={"job": "x"}), "spec.resumeFrom.step: Required value"),
    ],
)
def test_an_invalid_trainjob_is_refused_by_the_api_server(
    crd_installed: Any, k8s_namespace: str, job: dict[str, Any], message: str
) -> None:
    with pytest.raises(Exception):  # noqa: B017  # the model refuses it too
        TrainJob.from_dict(job)
    refused = apply(crd_installed, k8s_namespace, job)
    assert refused.returncode != 0
    assert message in refused.stderr, refused.stderr
    assert crd_installed.kubectl("get", "tj", "-n", k8s_namespace, "-o", "name").stdout == ""


@pytest.mark.cluster
def test_the_spec_is_immutable_but_metadata_and_status_are_not(
    crd_installed: Any, k8s_namespace: str
) -> None:
    """`kubectl edit` of a TrainJob's spec is refused (the controller would ignore it and
    `kubectl get` would show it); cancelling (an annotation), labels and the controller's
    status updates still work."""
    from kubernetes import client

    assert apply(crd_installed, k8s_namespace, VALID).returncode == 0
    again = apply(crd_installed, k8s_namespace, VALID)  # the same spec: nothing changes
    assert (again.returncode, again.stdout.strip()) == (
        0,
        "trainjob.aviflow.dev/tiny-regression unchanged",
    )
    with crd_installed.api_client() as api:
        custom = client.CustomObjectsApi(api)

        def patch(body: dict[str, Any], status: bool = False) -> Any:
            call = (
                custom.patch_namespaced_custom_object_status
                if status
                else custom.patch_namespaced_custom_object
            )
            return call(GROUP, VERSION, k8s_namespace, PLURAL, "tiny-regression", body)

        for change in (
            {"gpusPerNode": 4},
            {"queue": "another-team"},
            {"maxRestarts": 5},
            {"env": {"HF_HOME": "/elsewhere"}},
            {"resumeFrom": {"job": "someone-elses", "step": 1}},
            {"timeLimit": None},  # removing a field is a change too
        ):
            with pytest.raises(client.ApiException) as refused:
                patch({"spec": change})
            answer = json.loads(refused.value.body)
            assert (refused.value.status, answer["reason"]) == (422, "Invalid"), change
            assert answer["message"] == (
                f'TrainJob.aviflow.dev "tiny-regression" is invalid: spec: Invalid value: '
                f"{IMMUTABLE_SPEC['message']}"
            ), change
            assert answer["details"]["causes"] == [
                {
                    "reason": "FieldValueInvalid",
                    "message": f"Invalid value: {IMMUTABLE_SPEC['message']}",
                    "field": "spec",
                }
            ], change
        # the cancel path (aviflow cancel, or kubectl annotate), labels and the status stay open
        patch({"metadata": {"annotations": {ANNOTATION_CANCEL: "cancelled by alice"}}})
        patch({"metadata": {"labels": {"purpose": "test"}}})
        patch({"status": {"state": "CANCELLED", "message": "cancelled by alice"}}, status=True)
        stored = custom.get_namespaced_custom_object(
            GROUP, VERSION, k8s_namespace, PLURAL, "tiny-regression"
        )
    assert stored["metadata"]["annotations"][ANNOTATION_CANCEL] == "cancelled by alice"
    assert stored["metadata"]["labels"] == {"purpose": "test"}
    assert stored["status"]["state"] == "CANCELLED"
    assert {k: stored["spec"][k] for k in VALID["spec"]} == VALID["spec"]  # as created
    listed = crd_installed.kubectl("get", "tj", "tiny-regression", "-n", k8s_namespace)
    assert listed.stdout.splitlines()[1].split()[1:5] == ["CANCELLED", "vision", "2", "8"]
    crd_installed.kubectl("delete", "tj", "tiny-regression", "-n", k8s_namespace)
