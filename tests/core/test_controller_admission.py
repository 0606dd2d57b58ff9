"""What the controller does between a TrainJob's create call and its attempt Job (issue 28:
``bench/admission.py``'s room burst): new submissions are reconciled first, a first
reconcile makes only the calls it needs, the queue details wait ``queued_tick``. No cluster:
the controller's informer caches are filled by hand and its API clients record each call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from aviflow.k8s import manifests as m
from aviflow.k8s.settings import ClusterSettings
from aviflow.operator._controller import Controller
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore

NS = "team-a"


class Calls:
    """Stands for one of the controller's API clients: records every call as (method, name)
    and answers ``{}``, or the ApiException ``fail[method]`` gives."""

    def __init__(self, log: list[tuple[str, str]], fail: dict[str, int]) -> None:
        self._log, self._fail = log, fail

    def __getattr__(self, method: str) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            body = next((a for a in args if isinstance(a, dict)), {})
            name = (body.get("metadata") or {}).get("name") or next(
                (a for a in args if isinstance(a, str) and a != NS), ""
            )
            self._log.append((method, name))
            if method in self._fail:
                raise ApiException(status=self._fail[method])
            return {}

        return call


class Harness:
    """A controller of namespace ``team-a`` whose API calls land in ``calls``."""

    def __init__(self, tmp_path: Path, **settings: Any) -> None:
        raw = {"image": "t:1", "namespace": NS, "runs": {"localPath": str(tmp_path)}}
        self.settings = ClusterSettings.from_dict({**raw, **settings})
        self.store = RunStore(tmp_path)
        self.ctl = Controller(client.ApiClient(), self.settings, self.store, queued_tick=5.0)
        self.calls: list[tuple[str, str]] = []
        self.fail: dict[str, int] = {}
        for api in ("core", "net", "batch", "custom"):
            setattr(self.ctl, api, Calls(self.calls, self.fail))
        self.positions: list[str] = []

        def positions(ns: str, queue: str) -> dict[str, int]:
            self.positions.append(queue)
            return {f"job-{name}": 1 for name in ("x",)}

        self.ctl.reads.positions = positions  # type: ignore[method-assign]
        self.cell = self.ctl.cells[NS]

    def submit(self, name: str = "j1", nodes: int = 1) -> tuple[RunDir, dict[str, Any]]:
        """A job's run directory (as aviflow-api writes it) and its TrainJob in the cache."""
        spec = {"queue": "q", "nodes": nodes, "gpusPerNode": 1, "command": ["true"]}
        job = TrainJob.from_dict({"metadata": {"name": name}, "spec": spec})
        run = self.store.create(
            job, {}, "ada", team="a", backend="kubernetes", origin={"namespace": NS}, job_id=name
        )
        cr = {
            "apiVersion": "aviflow.dev/v1",
            "kind": "TrainJob",
            "metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}", "generation": 1},
            "spec": spec,
        }
        self.cell.trainjobs._put((NS, name), cr)
        return run, cr


def test_a_trainjob_never_reconciled_goes_ahead_of_the_others(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    ctl = h.ctl

    def trainjob(name: str, state: str | None, generation: int = 1) -> dict[str, Any]:
        meta = {"namespace": NS, "name": name, "uid": f"u-{name}", "generation": generation}
        return {"metadata": meta, "status": {"state": state} if state else {}}

    ctl._on_trainjob(trainjob("old", "QUEUED"))
    ctl._on_child({"metadata": {"namespace": NS, "labels": {m.LABEL_JOB: "older"}}})
    ctl._on_trainjob(trainjob("new-1", None))
    ctl._on_trainjob(trainjob("running", "RUNNING", generation=2))
    ctl._on_trainjob({"metadata": trainjob("new-2", None)["metadata"]})  # no status at all
    ctl._on_trainjob(trainjob("done", "SUCCEEDED"))  # final: not queued at all
    assert ctl.queue.waiting == [f"{NS}/{n}" for n in ("new-1", "new-2", "old", "older", "running")]
    # its own status patch coming back queues nothing; a deleted one is not urgent
    ctl._on_trainjob(trainjob("new-1", "QUEUED"))
    ctl._on_trainjob({**trainjob("gone", None), "deleted": True})
    assert ctl.queue.waiting[-1] == f"{NS}/gone" and len(ctl.queue.waiting) == 6
