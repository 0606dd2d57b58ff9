"""The controller's and aviflow-api's identities have what they need and nothing more
(``kubectl auth can-i`` as each service account, on the real API server)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from aviflow.k8s.rbac import API, CONTROLLER, identities, service_account_user

pytestmark = pytest.mark.cluster


def can(cluster: Any, who: str, verb: str, resource: str, ns: str | None) -> bool:
    resource, _, sub = resource.partition("/")  # "pods/log": the log subresource
    args = ["auth", "can-i", verb, resource, f"--as={who}"]
    args += [f"--subresource={sub}"] if sub else []
    args += ["-n", ns] if ns else []
    return cluster.kubectl(*args, check=False).stdout.strip() == "yes"


def test_service_accounts_are_least_privilege(crd_installed: Any, k8s_namespace: str) -> None:
    cluster, ns = crd_installed, k8s_namespace
    objects = identities(ns)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(objects))
    try:
        api, ctl = service_account_user(API, ns), service_account_user(CONTROLLER, ns)
        other = cluster.create_namespace()
        expected = {
            # aviflow-api: submit, read, cancel (annotate) TrainJobs; read queues
            (api, "create", "trainjobs.aviflow.dev", ns): True,
            (api, "patch", "trainjobs.aviflow.dev", ns): True,
            (api, "list", "localqueues.kueue.x-k8s.io", ns): True,
            (api, "get", "clusterqueues.kueue.x-k8s.io", None): True,
            (api, "create", "jobs.batch", ns): False,
            (api, "create", "pods", ns): False,
            (api, "get", "secrets", ns): False,
            (api, "delete", "trainjobs.aviflow.dev", ns): False,
            (api, "create", "trainjobs.aviflow.dev", other): False,
            (api, "patch", "trainjobs.aviflow.dev/status", ns): False,
            # the controller: attempts, services, reading pods and workloads, TrainJob status
            (ctl, "create", "jobs.batch", ns): True,
            (ctl, "delete", "jobs.batch", ns): True,
            (ctl, "create", "services", ns): True,
            (ctl, "get", "pods/log", ns): True,
            (ctl, "watch", "workloads.kueue.x-k8s.io", ns): True,
            (ctl, "patch", "trainjobs.aviflow.dev/status", ns): True,
            (ctl, "create", "trainjobs.aviflow.dev", ns): False,
            (ctl, "create", "pods", ns): False,
            (ctl, "get", "secrets", ns): False,
            (ctl, "create", "jobs.batch", other): False,
            (ctl, "patch", "workloads.kueue.x-k8s.io", ns): False,
        }
        got = {key: can(cluster, *key) for key in expected}
        assert got == expected
    finally:
        cluster.kubectl(
            "delete",
            "clusterrole,clusterrolebinding",
            f"{API}-{ns}",
            "--ignore-not-found",
            check=False,
        )


def test_the_controller_and_aviflow_api_run_a_job_with_only_their_service_accounts(
    make_pool: Any,
) -> None:
    from aviflow import api as aviflow_api
    from aviflow.backends.kubernetes import KubernetesBackend
    from aviflow.records import JobState

    pool = make_pool(controller=False)
    pool.cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(identities(pool.namespace)))
    try:
        pool.start_controller(pool.client_as(CONTROLLER))
        backend = KubernetesBackend(pool.settings, api=pool.client_as(API))
        job = aviflow_api.submit(
            {
                "metadata": {"name": "least"},
                "spec": {"nodes": 2, "gpusPerNode": 1, "command": ["true"]},
            },
            backend,
        )
        assert job.wait(timeout=180) is JobState.SUCCEEDED, job.events()
        from aviflow_testcluster import wait_for

        # Kueue releases the quota a moment after the job finished
        wait_for(
            lambda: (
                [(q.queue, q.gpu_quota, q.gpus_in_use) for q in backend.queues()]
                == [("default", 8, 0)]
            ),
            60,
            "the queue read as aviflow-api with its quota released",
        )
    finally:
        pool.cluster.kubectl(
            "delete", "clusterrole,clusterrolebinding", f"{API}-{pool.namespace}",
            "--ignore-not-found", check=False,
        )  # fmt: skip
