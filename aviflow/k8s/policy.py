"""Who may use which queue, enforced by the API server: a ValidatingAdmissionPolicy. Pure.

Teams' LocalQueues live in the jobs' namespace side by side, so RBAC (which cannot look at a
field) lets anyone who may create TrainJobs or Jobs there name any queue. The policy refuses
a TrainJob whose ``spec.queue``, or a Job whose ``kueue.x-k8s.io/queue-name`` label, names a
queue none of the requester's groups may use. The queue -> groups map is a ConfigMap
(``aviflow-queues``, the policy's parameters) in each jobs namespace: one key per queue, the
value a comma-separated list of groups. Users in its ``exempt`` key (the controller's and
aviflow-api's service accounts, which check teams themselves) pass.

A TrainJob also records who created it: one created by anyone but the exempt users must
carry the annotation ``aviflow.dev/user`` set to the requester's own username (the API
server's ``request.userInfo.username``), and no update may change it. The controller makes
that user the job's owner (``kubectl:<username>``), so a kubectl user's jobs are theirs,
not their namespace's. Only members of the team whose queue a TrainJob names may change it
(cancel it with the ``aviflow.dev/cancel`` annotation), besides the exempt users and cluster
admins (``system:masters``).

>>> params = queue_params("ml-jobs", {"vision": ["team-a"]}, exempt=["system:serviceaccount:aviflow:api"])
>>> params["data"]["vision"]
'team-a'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.manifests import ANNOTATION_USER, QUEUE_LABEL

POLICY = "aviflow-queue-access"
PARAMS = "aviflow-queues"
EXEMPT_KEY = "exempt"


def queue_policy() -> dict[str, Any]:
    """The ValidatingAdmissionPolicy (cluster-scoped; one for every jobs namespace)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [GROUP],
                        "apiVersions": [VERSION],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": [PLURAL],
                    },
                    {
                        "apiGroups": ["batch"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["jobs"],
                    },
                ]
            },
            "variables": [
                {"name": "queue", "expression": _queue("object")},
                {
                    "name": "changed",
                    "expression": "request.operation == 'CREATE' || "
                    f"variables.queue != ({_queue('oldObject')})",
                },
                {
                    "name": "exempt",
                    "expression": f"has(params.data) && '{EXEMPT_KEY}' in params.data && "
                    f"request.userInfo.username in params.data['{EXEMPT_KEY}'].split(',')",
                },
                {"name": "owner", "expression": _owner("object")},
                {
                    "name": "member",
                    "expression": "has(params.data) && variables.queue in params.data && "
                    "params.data[variables.queue].split(',').exists(g, g in "
                    "request.userInfo.groups)",
                },
            ],
            "validations": [
                {
                    "expression": "variables.queue == '' || !variables.changed || "
                    "variables.exempt || variables.member",
                    "messageExpression": (
                        "'queue ' + variables.queue + ' is not open to ' + "
                        "request.userInfo.username + ': use your team\\'s queue, or ask its "
                        "admins to add one of your groups to it'"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": "object.kind != 'TrainJob' || variables.exempt || "
                    "(request.operation == 'CREATE' ? variables.owner == "
                    f"request.userInfo.username : variables.owner == ({_owner('oldObject')}))",
                    "messageExpression": (
                        "request.operation == 'CREATE' ? 'a TrainJob records who creates it: "
                        f"set the annotation {ANNOTATION_USER}: ' + request.userInfo.username + "
                        "' (your username)' : 'the annotation "
                        f"{ANNOTATION_USER} of a TrainJob cannot change'"
                    ),
                    "reason": "Forbidden",
                },
                {
                    "expression": "object.kind != 'TrainJob' || request.operation != 'UPDATE' "
                    "|| variables.exempt || variables.member || "
                    "'system:masters' in request.userInfo.groups",
                    "messageExpression": (
                        "'only members of the team of queue ' + variables.queue + ' may change "
                        "or cancel its TrainJobs; ' + request.userInfo.username + ' is not one'"
                    ),
                    "reason": "Forbidden",
                },
            ],
        },
    }


def _queue(obj: str) -> str:
    """CEL: the queue ``obj`` (a TrainJob or a Job) names, '' for none."""
    return (
        f"{obj}.kind == 'TrainJob' ? ({obj}.spec.queue) : "
        f"(has({obj}.metadata.labels) && '{QUEUE_LABEL}' in {obj}.metadata.labels ? "
        f"{obj}.metadata.labels['{QUEUE_LABEL}'] : '')"
    )


def _owner(obj: str) -> str:
    """CEL: the user a TrainJob ``obj`` says created it, '' for none."""
    return (
        f"has({obj}.metadata.annotations) && '{ANNOTATION_USER}' in {obj}.metadata.annotations"
        f" ? {obj}.metadata.annotations['{ANNOTATION_USER}'] : ''"
    )


def queue_binding() -> dict[str, Any]:
    """The binding: parameters from the ``aviflow-queues`` ConfigMap of the object's own
    namespace; a namespace without it is not governed (no Aviflow queues there)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "paramRef": {"name": PARAMS, "parameterNotFoundAction": "Allow"},
        },
    }


def queue_params(
    namespace: str, queues: Mapping[str, Iterable[str]], exempt: Iterable[str] = ()
) -> dict[str, Any]:
    """The parameters: queue -> the groups that may use it, and the exempt users."""
    data = {queue: ",".join(sorted(set(groups))) for queue, groups in sorted(queues.items())}
    if EXEMPT_KEY in data:
        raise ValueError(f"a queue may not be named {EXEMPT_KEY!r}")
    data[EXEMPT_KEY] = ",".join(sorted(set(exempt)))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PARAMS, "namespace": namespace},
        "data": data,
    }
