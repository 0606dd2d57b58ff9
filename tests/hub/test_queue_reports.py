"""aviflow-api's background view of the backend's queues (:mod:`aviflow_hub.service.queue_reports`):
what a refresh read stays until the next one that succeeds. (On the cluster, what Kueue says a
queue borrows: tests/k8s/test_trainjobs.py, the preempted borrower.)"""

from __future__ import annotations

import json
from pathlib import Path

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.backends.local import QUOTAS_FILE, LocalBackend
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import QueueQuota
from aviflow_hub.service.queue_reports import QueueReports


def test_a_refresh_keeps_the_backends_records_and_a_failed_one_keeps_the_last(
    tmp_path: Path,
) -> None:
    local = LocalBackend(root=tmp_path / "runs")
    local.store.file(QUOTAS_FILE).parent.mkdir(parents=True, exist_ok=True)
    local.store.file(QUOTAS_FILE).write_text(json.dumps({"qa": 4}))
    reports = QueueReports(local)
    assert dict(reports.latest()) == {}
    reports.refresh()
    assert dict(reports.latest()) == {"qa": QueueQuota("qa", gpu_quota=4)}
    assert (LocalBackend.reports_borrowing, KubernetesBackend.reports_borrowing) == (False, True)
    # an API server that does not answer: the last view stays, the failure is counted
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    down = KubernetesBackend(
        ClusterSettings.from_dict({"runs": {"localPath": str(tmp_path / "k8s-runs")}}),
        kubeconfig=str(kubeconfig),
    )
    before = reports.latest()
    reports.backend = down
    reports.refresh()
    reports.refresh()
    assert (reports.latest(), reports.failures) == (before, 2)
    reports.backend = local
    reports.refresh()
    assert (reports.latest()["qa"].gpu_quota, reports.failures) == (4, 0)
