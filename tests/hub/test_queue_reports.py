"""aviflow-api's background view of the backend's queues (:mod:`aviflow_hub.service.queue_reports`):
what a refresh read stays until the next one that succeeds. (On the cluster, what Kueue says a
queue borrows: tests/k8s/test_trainjobs.py, the preempted borrower.)"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.backends.local import QUOTAS_FILE, LocalBackend
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import QueueQuota
from aviflow_hub.service.lanes import Lane
from aviflow_hub.service.queue_reports import WATCHED_FOR, QueueRefresher, QueueReports


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


class CountingBackend(LocalBackend):
    """A local backend that counts its reads of the queues."""

    calls = 0

    def queues(self) -> list[QueueQuota]:
        self.calls += 1
        return super().queues()


def test_the_backend_is_read_only_while_someone_watched_the_queues(tmp_path: Path) -> None:
    backend = CountingBackend(root=tmp_path / "runs")
    backend.store.file(QUOTAS_FILE).parent.mkdir(parents=True, exist_ok=True)
    backend.store.file(QUOTAS_FILE).write_text(json.dumps({"qa": 4}))
    now = [1000.0]
    reports = QueueReports(backend, clock=lambda: now[0])
    wakes: list[float] = []
    reports.on_wake = lambda: wakes.append(now[0])
    ticks = [reports.refresh_if_watched() for _ in range(3)]  # an idle hub asks nothing
    assert (ticks, backend.calls, wakes) == ([False] * 3, 0, [])

    reports.latest()  # someone looks: the refreshes go on for WATCHED_FOR seconds
    assert (wakes, reports.watched()) == ([1000.0], True)
    for t in (1000.0, 1010.0, 1299.9):
        now[0] = t
        assert reports.refresh_if_watched() is True
    assert backend.calls == 3
    reports.latest()  # a look within the window: no wake, the window moves on
    now[0] = 1299.9 + WATCHED_FOR - 0.1
    assert (reports.refresh_if_watched(), backend.calls, wakes) == (True, 4, [1000.0])

    now[0] = 1299.9 + WATCHED_FOR  # nobody looked for WATCHED_FOR seconds: the reads stop
    assert [reports.refresh_if_watched() for _ in range(5)] == [False] * 5
    now[0] += 3600.0
    assert (reports.refresh_if_watched(), backend.calls) == (False, 4)

    # the first look after an idle spell wakes the refreshes at once, and the view read an
    # hour ago is not shown meanwhile
    assert dict(reports.latest()) == {}
    assert (wakes, reports.refresh_if_watched(), backend.calls) == ([1000.0, now[0]], True, 5)
    assert dict(reports.latest()) == {"qa": QueueQuota("qa", gpu_quota=4)}
    # refresh() itself always reads (the service's first read, at start)
    reports.refresh()
    assert backend.calls == 6


class GatedBackend(CountingBackend):
    """Its reads of the queues wait for ``gate`` (a backend that stalls)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root=root)
        self.gate = threading.Event()
        self.gate.set()

    def queues(self) -> list[QueueQuota]:
        assert self.gate.wait(10)
        return super().queues()


async def _until(check: object, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not check():  # type: ignore[operator]
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.01)


def test_the_service_reads_at_start_and_a_look_after_an_idle_spell_reads_at_once(
    tmp_path: Path,
) -> None:
    """The service's wiring (:class:`QueueRefresher`, as ``aviflow_hub.service.app`` starts
    it): one read at start; the first look after an idle spell starts one at once, in the
    queues' lane; a look while that read waits on the backend starts no second one."""
    backend = GatedBackend(tmp_path / "runs")
    backend.store.file(QUOTAS_FILE).parent.mkdir(parents=True, exist_ok=True)
    backend.store.file(QUOTAS_FILE).write_text(json.dumps({"qa": 4}))
    now = [1000.0]
    reports = QueueReports(backend, clock=lambda: now[0])
    lane = Lane("queues", 1, "reading the backend's queues")

    async def scenario() -> None:
        refresher = QueueRefresher(reports, lane)
        await refresher.start()
        assert backend.calls == 1 and reports.on_wake is not None
        assert dict(reports.latest()) == {"qa": QueueQuota("qa", gpu_quota=4)}
        await asyncio.sleep(0.05)
        assert backend.calls == 2  # that first look woke a read (nobody had looked before)
        now[0] += WATCHED_FOR + 1  # an idle spell: the view is too old to show
        backend.gate.clear()  # the backend stalls
        assert dict(reports.latest()) == {}
        await _until(lambda: lane.busy == 1)  # the wake's read waits on the backend
        reports.latest()  # a look within the window: no wake
        now[0] += WATCHED_FOR + 1
        reports.latest()  # a wake while the read waits: nothing more
        await asyncio.sleep(0.05)
        assert (backend.calls, lane.busy) == (2, 1)
        backend.gate.set()
        await _until(lambda: backend.calls == 3 and lane.busy == 0)
        await asyncio.sleep(0.05)
        assert backend.calls == 3  # no read was left waiting to follow it
        assert dict(reports.latest()) == {"qa": QueueQuota("qa", gpu_quota=4)}
        refresher.stop()
        assert reports.on_wake is None

    try:
        asyncio.run(scenario())
    finally:
        backend.gate.set()
        lane.close()
