"""Who may use which queue, enforced by the API server: a ValidatingAdmissionPolicy. Pure.

Teams' LocalQueues live in the jobs' namespace side by side, so RBAC (which cannot look at a
field) lets anyone who may create TrainJobs or Jobs there name any queue. The policy refuses
a TrainJob whose ``spec.queue``, or a Job whose ``kueue.x-k8s.io/queue-name`` label, names a
queue none of the requester's groups may use. The queue -> groups map is a ConfigMap
(``aviflow-queues``, the policy's parameters) in each jobs namespace: one key per queue, the
value a comma-separated list of groups. Users in its ``exempt`` key (the controller's and
aviflow-api's service accounts, which check teams themselves) pass.

In a jobs namespace Kueue admits everything: a Job created by anyone but the exempt users must
name a queue, run as the namespace's ``default`` service account, mount none of the claims
the platform keeps for itself (``protectedClaims``: the run store holds every user's runs),
keep off the node (no host network, PID or IPC namespace, no ``hostPath``, nothing
privileged) and name a priority class only if its team's queue allows it
(``priorityClasses.<queue>``: a Kueue ``WorkloadPriorityClass`` label or a pod's
``priorityClassName``) and run only the images an admin allows (``allowedImages``: the
trainer images' references; a TrainJob's ``spec.image`` may also give their names,
``allowedImageNames``). The binding selects the jobs namespaces by name and **fails closed**:
an object there is refused while the parameters are missing.

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
>>> queue_params("ml-jobs", {"vision": ["a"]}, priority={"vision": ["high"]})["data"]["priorityClasses.vision"]
'high'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aviflow.k8s.crd import GROUP, PLURAL, VERSION
from aviflow.k8s.manifests import ANNOTATION_USER, PRIORITY_LABEL, QUEUE_LABEL

POLICY = "aviflow-queue-access"
PARAMS = "aviflow-queues"
EXEMPT_KEY = "exempt"
# Keys no queue can have (a LocalQueue's name is lower case)
CLAIMS_KEY = "protectedClaims"
PRIORITY_KEY = "priorityClasses."
IMAGES_KEY = "allowedImages"  # the references pods may run (the trainer images)
IMAGE_NAMES_KEY = "allowedImageNames"  # and their names, which a TrainJob may give instead


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
                {"name": "job", "expression": "object.kind == 'Job'"},
                {"name": "pod", "expression": "object.spec.template.spec"},
                *(
                    {"name": name, "expression": _param_list(key)}
                    for name, key in (
                        ("protected", f"'{CLAIMS_KEY}'"),
                        ("images", f"'{IMAGES_KEY}'"),
                        ("imageNames", f"'{IMAGE_NAMES_KEY}'"),
                        ("priorities", f"('{PRIORITY_KEY}' + variables.queue)"),
                    )
                ),
                {"name": "priority", "expression": _priority("object")},
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
                *_job_validations(),
                {
                    "expression": "object.kind != 'TrainJob' || variables.exempt || "
                    "request.operation != 'CREATE' || !has(object.spec.image) || "
                    "object.spec.image in variables.images || "
                    "object.spec.image in variables.imageNames",
                    "messageExpression": "'image ' + object.spec.image + ' is not one of the "
                    "trainer images an admin allows: ' + (variables.imageNames + "
                    "variables.images).join(', ')",
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


def _job_validations() -> list[dict[str, str]]:
    """What a Job (not the controller's or aviflow-api's) must be in a jobs namespace, checked
    when it is created: its pod template cannot change after that, save the scheduling
    directives Kueue writes while it is suspended (an update by Kueue, by anyone, passes); a
    priority label may not change to one the queue does not allow."""
    allowed = "!variables.job || variables.exempt || request.operation != 'CREATE' || "
    return [
        {
            "expression": allowed + "variables.queue != ''",
            "message": f"a Job here must name its team's queue in the label {QUEUE_LABEL}: "
            "Kueue admits every job in this namespace",
            "reason": "Forbidden",
        },
        {
            "expression": allowed + "((!has(variables.pod.serviceAccountName) || "
            "variables.pod.serviceAccountName in ['', 'default']) && "
            "(!has(variables.pod.serviceAccount) || "
            "variables.pod.serviceAccount in ['', 'default']))",
            "messageExpression": "'a Job here runs as the namespace\\'s default service "
            "account, not ' + (has(variables.pod.serviceAccountName) ? "
            "variables.pod.serviceAccountName : variables.pod.serviceAccount)",
            "reason": "Forbidden",
        },
        {
            "expression": allowed + "!has(variables.pod.volumes) || variables.pod.volumes.all("
            "v, !has(v.persistentVolumeClaim) || "
            "!(v.persistentVolumeClaim.claimName in variables.protected))",
            "messageExpression": "'a Job may not mount the claim ' + variables.pod.volumes.filter("
            "v, has(v.persistentVolumeClaim) && v.persistentVolumeClaim.claimName in "
            "variables.protected)[0].persistentVolumeClaim.claimName + ': it holds every "
            "user\\'s runs, which only Aviflow\\'s controller mounts'",
            "reason": "Forbidden",
        },
        {
            "expression": allowed + "(!has(variables.pod.hostNetwork) || "
            "!variables.pod.hostNetwork) && (!has(variables.pod.hostPID) || "
            "!variables.pod.hostPID) && (!has(variables.pod.hostIPC) || !variables.pod.hostIPC)"
            " && (!has(variables.pod.volumes) || variables.pod.volumes.all(v, !has(v.hostPath)))"
            " && [has(variables.pod.initContainers) ? variables.pod.initContainers : [], "
            "variables.pod.containers].all(cs, cs.all(c, !has(c.securityContext) || "
            "!has(c.securityContext.privileged) || !c.securityContext.privileged))",
            "message": "a Job here may not reach into its node: no host network, PID or IPC "
            "namespace, no hostPath volume, no privileged container",
            "reason": "Forbidden",
        },
        {
            "expression": allowed + "[has(variables.pod.initContainers) ? "
            "variables.pod.initContainers : [], variables.pod.containers].all(cs, "
            "cs.all(c, c.image in variables.images))",
            "messageExpression": "'a Job here runs only the images an admin allows (' + "
            "variables.images.join(', ') + '), not ' + [has(variables.pod.initContainers) ? "
            "variables.pod.initContainers : [], variables.pod.containers].map(cs, cs.filter("
            "c, !(c.image in variables.images)).map(c, c.image)).filter(l, l.size() > 0)[0][0]",
            "reason": "Forbidden",
        },
        {
            "expression": "!variables.job || variables.exempt || (request.operation != 'CREATE'"
            f" && variables.priority == ({_priority('oldObject')})) || "
            "(variables.priority == '' || variables.priority in "
            "variables.priorities) && (!has(variables.pod.priorityClassName) || "
            "variables.pod.priorityClassName in variables.priorities)",
            "messageExpression": "'queue ' + variables.queue + ' allows ' + "
            "(variables.priorities.size() == 0 ? 'no priority class' : 'the priority classes '"
            " + variables.priorities.join(', ')) + ', not ' + (variables.priority != '' ? "
            "variables.priority : variables.pod.priorityClassName)",
            "reason": "Forbidden",
        },
    ]


def _queue(obj: str) -> str:
    """CEL: the queue ``obj`` (a TrainJob or a Job) names, '' for none."""
    return (
        f"{obj}.kind == 'TrainJob' ? ({obj}.spec.queue) : "
        f"(has({obj}.metadata.labels) && '{QUEUE_LABEL}' in {obj}.metadata.labels ? "
        f"{obj}.metadata.labels['{QUEUE_LABEL}'] : '')"
    )


def _param_list(key: str) -> str:
    """CEL: the comma-separated list under the parameter ``key`` (a CEL string), [] without it."""
    return (
        f"has(params.data) && {key} in params.data ? "
        f"params.data[{key}].split(',').filter(c, c != '') : []"
    )


def _priority(obj: str) -> str:
    """CEL: the Kueue priority class a Job ``obj`` names by label, '' for none."""
    return (
        f"has({obj}.metadata.labels) && '{PRIORITY_LABEL}' in {obj}.metadata.labels ? "
        f"{obj}.metadata.labels['{PRIORITY_LABEL}'] : ''"
    )


def _owner(obj: str) -> str:
    """CEL: the user a TrainJob ``obj`` says created it, '' for none."""
    return (
        f"has({obj}.metadata.annotations) && '{ANNOTATION_USER}' in {obj}.metadata.annotations"
        f" ? {obj}.metadata.annotations['{ANNOTATION_USER}'] : ''"
    )


def queue_binding(namespaces: Iterable[str]) -> dict[str, Any]:
    """The binding: it governs the jobs ``namespaces`` (by name), with the parameters from the
    ``aviflow-queues`` ConfigMap of the object's own namespace; while that is missing, every
    TrainJob and Job there is refused (fails closed)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY},
        "spec": {
            "policyName": POLICY,
            "validationActions": ["Deny"],
            "paramRef": {"name": PARAMS, "parameterNotFoundAction": "Deny"},
            "matchResources": {
                "namespaceSelector": {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": sorted(set(namespaces)),
                        }
                    ]
                }
            },
        },
    }


def queue_params(
    namespace: str,
    queues: Mapping[str, Iterable[str]],
    exempt: Iterable[str] = (),
    protected_claims: Iterable[str] = (),
    priority: Mapping[str, Iterable[str]] | None = None,
    images: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The parameters: queue -> the groups that may use it, the exempt users, the claims no
    user's Job may mount, per queue the priority classes its Jobs may name, and the allowed
    images (name -> reference: the trainer images)."""
    if EXEMPT_KEY in queues:  # the other keys are not lower case: no queue's name
        raise ValueError(f"a queue may not be named {EXEMPT_KEY!r}")
    data = {queue: ",".join(sorted(set(groups))) for queue, groups in sorted(queues.items())}
    data[EXEMPT_KEY] = ",".join(sorted(set(exempt)))
    data[CLAIMS_KEY] = ",".join(sorted(set(protected_claims)))
    data[IMAGES_KEY] = ",".join(sorted(set((images or {}).values())))
    data[IMAGE_NAMES_KEY] = ",".join(sorted(set(images or {})))
    for queue, classes in sorted((priority or {}).items()):
        data[PRIORITY_KEY + queue] = ",".join(sorted(set(classes)))
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": PARAMS, "namespace": namespace},
        "data": data,
    }
