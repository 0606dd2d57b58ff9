"""Queues are per team: the ValidatingAdmissionPolicy refuses, for anyone with kubectl access,
a TrainJob or a Kueue Job that names another team's LocalQueue (real API server; users are
impersonated with ``kubectl --as``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from aviflow.k8s.crd import IMMUTABLE_SPEC
from aviflow.k8s.manifests import ANNOTATION_CANCEL, ANNOTATION_USER
from aviflow.k8s.policy import PARAMS, POLICY, queue_binding, queue_params, queue_policy
from aviflow_testcluster import wait_for

pytestmark = pytest.mark.cluster


def trainjob(name: str, queue: str, owner: str | None = "dave") -> dict[str, Any]:
    """A TrainJob as ``owner`` would write it (None: without the owner annotation)."""
    meta: dict[str, Any] = {"name": name}
    if owner is not None:
        meta["annotations"] = {ANNOTATION_USER: owner}
    return {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": meta,
        "spec": {"queue": queue, "command": ["true"]},
    }


def kueue_job(
    name: str, queue: str | None, labels: dict[str, str] | None = None, **pod: Any
) -> dict[str, Any]:
    """A Kueue Job in ``queue`` (None: no queue label) with ``pod`` merged into its pod spec."""
    meta_labels = {**({"kueue.x-k8s.io/queue-name": queue} if queue else {}), **(labels or {})}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": meta_labels},
        "spec": {
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "x", "command": ["true"]}],
                    **pod,
                }
            },
        },
    }


def test_a_user_cannot_put_a_job_into_another_teams_queue(
    crd_installed: Any, k8s_namespace: str
) -> None:
    cluster, ns = crd_installed, k8s_namespace
    rbac = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "submitters", "namespace": ns},
            "rules": [
                {
                    "apiGroups": ["aviflow.dev"],
                    "resources": ["trainjobs"],
                    "verbs": ["create", "get", "patch", "update"],
                },
                {
                    "apiGroups": ["batch"],
                    "resources": ["jobs"],
                    "verbs": ["create", "get", "patch", "update"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "submitters", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "submitters",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}
                for g in ("team-a", "team-b")
            ],
        },
    ]
    params = queue_params(
        ns,
        {"queue-a": ["team-a"], "queue-b": ["team-b", "admins"]},
        exempt=[f"system:serviceaccount:{ns}:controller"],
        protected_claims=["runs"],
        priority={"queue-b": ["high"]},
        images={"trainer": "x"},
    )
    docs = [queue_policy(), queue_binding([ns]), params, *rbac]
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
    try:

        def as_dave(obj: dict[str, Any]) -> Any:
            return cluster.kubectl(
                "create", "-n", ns, "--as=dave", "--as-group=team-b", "-f", "-",
                input=json.dumps(obj), check=False,
            )  # fmt: skip

        # the policy takes effect once the API server has loaded it: retry the refusal
        import time

        deadline = time.monotonic() + 30
        while True:
            done = as_dave(trainjob("sneaky", "queue-a"))
            if done.returncode != 0 or time.monotonic() > deadline:
                break
            cluster.kubectl("delete", "trainjob", "sneaky", "-n", ns)
            time.sleep(0.5)
        assert done.returncode != 0
        assert (
            "queue queue-a is not open to dave: use your team's queue, or ask its admins to add "
            "one of your groups to it" in done.stderr
        ), done.stderr
        assert "ValidatingAdmissionPolicy 'aviflow-queue-access'" in done.stderr
        refused = as_dave(kueue_job("sneaky-job", "queue-a"))
        assert refused.returncode != 0 and "queue queue-a is not open to dave" in refused.stderr
        ok = as_dave(trainjob("fine", "queue-b"))
        assert ok.returncode == 0, ok.stderr
        assert as_dave(kueue_job("fine-job", "queue-b")).returncode == 0
        # moving an own job to another team's queue is refused too: a TrainJob's spec by the
        # CRD (it never changes), a Kueue Job's queue label by the policy
        moved = cluster.kubectl(
            "patch", "trainjob", "fine", "-n", ns, "--as=dave", "--as-group=team-b", "--type=merge",
            "-p", json.dumps({"spec": {"queue": "queue-a"}}), check=False,
        )  # fmt: skip
        assert moved.returncode != 0 and IMMUTABLE_SPEC["message"] in moved.stderr, moved.stderr
        moved = cluster.kubectl(
            "patch", "job", "fine-job", "-n", ns, "--as=dave", "--as-group=team-b", "--type=merge",
            "-p", json.dumps({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "queue-a"}}}),
            check=False,
        )  # fmt: skip
        assert moved.returncode != 0 and "queue queue-a is not open to dave" in moved.stderr
        assert cluster.kubectl("get", "trainjobs", "-n", ns, "-o", "name").stdout.split() == [
            "trainjob.aviflow.dev/fine"
        ]
        # a TrainJob records who created it: its own requester's name, and nobody else's
        owner_missing = (
            "a TrainJob records who creates it: set the annotation aviflow.dev/user: dave "
            "(your username)"
        )
        for body in (trainjob("no-owner", "queue-b", None), trainjob("forged", "queue-b", "erin")):
            refused = as_dave(body)
            assert refused.returncode != 0 and owner_missing in refused.stderr, refused.stderr

        def as_erin(*args: str) -> Any:
            return cluster.kubectl(
                *args, "-n", ns, "--as=erin", "--as-group=team-b", check=False
            )  # fmt: skip

        # a teammate may cancel dave's job (an annotation), but not make it theirs
        cancel = as_erin("annotate", "trainjob", "fine", f"{ANNOTATION_CANCEL}=erin stops it")
        assert cancel.returncode == 0, cancel.stderr
        taken = as_erin("annotate", "--overwrite", "trainjob", "fine", f"{ANNOTATION_USER}=erin")
        assert taken.returncode != 0, taken.stderr
        assert "the annotation aviflow.dev/user of a TrainJob cannot change" in taken.stderr
        # a member of another team may not cancel it
        stop = cluster.kubectl(
            "annotate", "--overwrite", "trainjob", "fine", f"{ANNOTATION_CANCEL}=not yours",
            "-n", ns, "--as=frank", "--as-group=team-a", check=False,
        )  # fmt: skip
        assert stop.returncode != 0, stop.stderr
        assert (
            "only members of the team of queue queue-b may change or cancel its TrainJobs; "
            "frank is not one" in stop.stderr
        ), stop.stderr
        annotations = cluster.kubectl(
            "get", "trainjob", "fine", "-n", ns, "-o", "jsonpath={.metadata.annotations}"
        ).stdout
        assert json.loads(annotations)[ANNOTATION_USER] == "dave", annotations
        assert json.loads(annotations)[ANNOTATION_CANCEL] == "erin stops it", annotations
        hostile_jobs_are_refused(cluster, ns, as_dave)
    finally:
        cluster.kubectl(
            "delete",
            "validatingadmissionpolicybinding,validatingadmissionpolicy",
            POLICY,
            check=False,
        )


def hostile_jobs_are_refused(cluster: Any, ns: str, as_dave: Any) -> None:
    """A Job in a jobs namespace goes through Kueue, as the default service account, off the
    run store and the node, at a priority its queue allows; the policy governs the jobs
    namespaces only, and fails closed there when its parameters are missing."""
    on_node = (
        "a Job here may not reach into its node: no host network, PID or IPC namespace, no "
        "hostPath volume, no privileged container"
    )
    privileged = {"securityContext": {"privileged": True}}
    refusals = {
        "no-queue": (
            kueue_job("no-queue", None),
            "a Job here must name its team's queue in the label kueue.x-k8s.io/queue-name: "
            "Kueue admits every job in this namespace",
        ),
        "controller-sa": (
            kueue_job("controller-sa", "queue-b", serviceAccountName="aviflow-controller"),
            "a Job here runs as the namespace's default service account, not aviflow-controller",
        ),
        "run-store": (
            kueue_job(
                "run-store",
                "queue-b",
                volumes=[{"name": "r", "persistentVolumeClaim": {"claimName": "runs"}}],
            ),
            "a Job may not mount the claim runs: it holds every user's runs, which only "
            "Aviflow's controller mounts",
        ),
        "host-network": (kueue_job("host-network", "queue-b", hostNetwork=True), on_node),
        "host-path": (
            kueue_job("host-path", "queue-b", volumes=[{"name": "h", "hostPath": {"path": "/"}}]),
            on_node,
        ),
        "privileged": (
            kueue_job(
                "privileged",
                "queue-b",
                containers=[{"name": "c", "image": "x", "command": ["true"], **privileged}],
            ),
            on_node,
        ),
        "urgent": (
            kueue_job("urgent", "queue-b", {"kueue.x-k8s.io/priority-class": "urgent"}),
            "queue queue-b allows the priority classes high, not urgent",
        ),
        "critical": (
            kueue_job("critical", "queue-b", priorityClassName="system-cluster-critical"),
            "queue queue-b allows the priority classes high, not system-cluster-critical",
        ),
        "other-image": (
            kueue_job(
                "other-image",
                "queue-b",
                initContainers=[{"name": "i", "image": "x", "command": ["true"]}],
                containers=[{"name": "c", "image": "evil:1", "command": ["true"]}],
            ),
            "a Job here runs only the images an admin allows (x), not evil:1",
        ),
        "other-trainer": (
            {
                **trainjob("other-trainer", "queue-b"),
                "spec": {"queue": "queue-b", "command": ["true"], "image": "evil:1"},
            },
            "image evil:1 is not one of the trainer images an admin allows: trainer, x",
        ),
    }
    for name, (body, message) in refusals.items():
        done = as_dave(body)
        assert done.returncode != 0 and message in done.stderr, (name, done.stderr)
    fine = kueue_job("high", "queue-b", {"kueue.x-k8s.io/priority-class": "high"})
    done = cluster.kubectl(
        "create", "-n", ns, "--as=dave", "--as-group=team-b", "--dry-run=server", "-f", "-",
        input=json.dumps(fine), check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # a Job of the controller's (exempt) mounts the run store; Kueue, or anyone, may update
    # it after (its pod template cannot change), but not give it a priority its queue lacks
    platform = kueue_job(
        "platform", "queue-b",
        volumes=[{"name": "r", "persistentVolumeClaim": {"claimName": "runs"}}],
    )  # fmt: skip
    made = cluster.kubectl(
        "create", "-n", ns, f"--as=system:serviceaccount:{ns}:controller", "--as-group=team-b",
        "-f", "-", input=json.dumps(platform), check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    for label, ok in (("scheduled=yes", True), ("kueue.x-k8s.io/priority-class=urgent", False)):
        done = cluster.kubectl(
            "label", "job", "platform", label, "-n", ns, "--as=dave", "--as-group=team-b",
            check=False,
        )  # fmt: skip
        assert (done.returncode == 0) is ok, (label, done.stderr)
    assert "queue queue-b allows the priority classes high, not urgent" in done.stderr
    cluster.kubectl("delete", "job", "platform", "-n", ns)
    # another namespace is not governed: no Aviflow queues there
    other = cluster.create_namespace()
    done = cluster.kubectl(
        "create", "-n", other, "--dry-run=server", "-f", "-",
        input=json.dumps(kueue_job("elsewhere", None)),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    cluster.kubectl("delete", "namespace", other, "--wait=false")
    # without its parameters the policy refuses everything in the jobs namespace
    cluster.kubectl("delete", "configmap", PARAMS, "-n", ns)
    closed = wait_for(
        lambda: (d := as_dave(trainjob("while-closed", "queue-b"))).returncode != 0 and d,
        30,
        "the policy fails closed",
    )
    assert "aviflow-queue-access" in closed.stderr, closed.stderr
