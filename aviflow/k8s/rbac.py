"""Least-privilege identities of the controller and of aviflow-api. Pure builders.

- ``aviflow-controller`` (in ``namespace``, the jobs' namespace): reads TrainJobs and writes
  their status; creates and deletes the Jobs, Services and NetworkPolicies of their attempts; reads Pods, their
  logs and Kueue's Workloads, and Kueue's pending lists. Nothing cluster-wide. In the control
  plane's namespace, its leader-election Lease (:func:`leader_rules`).
- ``aviflow-api``: creates, reads and annotates (cancel) TrainJobs; reads the LocalQueues of
  the namespace, the ClusterQueues behind them and Kueue's pending lists. It cannot create
  Jobs or Pods, read Secrets, or touch any other namespace.

Notebooks get no Kubernetes identity at all (they use aviflow-api with their hub token).
"""

from __future__ import annotations

from typing import Any

from aviflow.k8s.crd import GROUP, PLURAL

CONTROLLER, API = "aviflow-controller", "aviflow-api"
KUEUE = "kueue.x-k8s.io"
VISIBILITY = "visibility.kueue.x-k8s.io"
_RBAC = "rbac.authorization.k8s.io/v1"


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


READ = ["get", "list", "watch"]
CONTROLLER_RULES = [
    _rule([GROUP], [PLURAL], READ),
    _rule([GROUP], [f"{PLURAL}/status"], ["get", "patch", "update"]),
    _rule(["batch"], ["jobs"], [*READ, "create", "delete"]),
    _rule([""], ["services"], ["get", "create", "delete"]),
    _rule(["networking.k8s.io"], ["networkpolicies"], ["get", "create", "delete"]),
    _rule([""], ["pods"], READ),
    _rule([""], ["pods/log"], ["get"]),
    _rule([KUEUE], ["workloads"], READ),
    _rule([KUEUE], ["localqueues"], ["get"]),  # a kubectl TrainJob's team: its queue's label
    _rule([VISIBILITY], ["localqueues/pendingworkloads"], ["get"]),
]


def leader_rules(lease: str) -> list[dict[str, Any]]:
    """The controller's, in the control plane's namespace: its leader-election Lease
    (``create`` cannot be held to one name; the rest is)."""
    return [
        _rule(["coordination.k8s.io"], ["leases"], ["create"]),
        {**_rule(["coordination.k8s.io"], ["leases"], ["get", "update"]), "resourceNames": [lease]},
    ]


API_RULES = [
    _rule([GROUP], [PLURAL], [*READ, "create", "patch"]),
    _rule([KUEUE], ["localqueues"], READ),
    _rule([VISIBILITY], ["localqueues/pendingworkloads"], ["get"]),
]
API_CLUSTER_RULES = [_rule([KUEUE], ["clusterqueues"], ["get", "list"])]
# The controller reads the ClusterQueues' limits and use for its start-time forecast
# (aviflow.operator._forecast); cluster-scoped, read-only.
CONTROLLER_CLUSTER_RULES = [_rule([KUEUE], ["clusterqueues"], ["get", "list"])]
# A team member with kubectl, in the team's namespace (the chart's kubectlAccess): TrainJobs
# (create, read, annotate to cancel), their pods' logs, the queue and its Workloads, and the
# team's Secrets. The queue
# policy holds every TrainJob to the team's queue and records its creator.
MEMBER_RULES = [
    _rule([GROUP], [PLURAL], [*READ, "create", "patch"]),
    _rule([""], ["pods"], READ),
    _rule([""], ["pods/log"], ["get"]),
    _rule([""], ["events"], READ),
    _rule([KUEUE], ["localqueues", "workloads"], READ),
    _rule([VISIBILITY], ["localqueues/pendingworkloads"], ["get"]),
    # the team's Secrets, which its jobs name in spec.secrets (a model hub token, a key)
    _rule([""], ["secrets"], ["get", "list", "create", "update", "patch", "delete"]),
]
# ...and, where the admin allows plain Kueue Jobs (kubectlAccess.jobs), Jobs, which the queue
# policy holds to the team's queue, the default service account and off the node.
MEMBER_JOB_RULES = [_rule(["batch"], ["jobs"], [*READ, "create", "delete"])]


def identities(namespace: str, sa_namespace: str | None = None) -> list[dict[str, Any]]:
    """ServiceAccounts (in ``sa_namespace``, default the jobs' namespace), Roles and bindings
    for the controller and aviflow-api over the jobs' ``namespace``."""
    sa_ns = sa_namespace or namespace
    out: list[dict[str, Any]] = []
    for name, rules in ((CONTROLLER, CONTROLLER_RULES), (API, API_RULES)):
        subject = [{"kind": "ServiceAccount", "name": name, "namespace": sa_ns}]
        out += [
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": name, "namespace": sa_ns},
                "automountServiceAccountToken": True,
            },
            {
                "apiVersion": _RBAC,
                "kind": "Role",
                "metadata": {"name": name, "namespace": namespace},
                "rules": rules,
            },
            {
                "apiVersion": _RBAC,
                "kind": "RoleBinding",
                "metadata": {"name": name, "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": subject,
            },
        ]
    cluster_name = f"{API}-{namespace}"
    out += [
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": cluster_name},
            "rules": API_CLUSTER_RULES,
        },
        {
            "apiVersion": _RBAC,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_name,
            },
            "subjects": [{"kind": "ServiceAccount", "name": API, "namespace": sa_ns}],
        },
    ]
    return out


def service_account_user(name: str, namespace: str) -> str:
    """The user name the API server gives a ServiceAccount's tokens."""
    return f"system:serviceaccount:{namespace}:{name}"
