"""Pending submissions, pure: the controller's sweep over a temporary run store, the TrainJobs
the cache and the API server have given as dicts; a second request for a job id being written
(``tests/k8s/test_orphans.py`` has the rest, on the test control plane)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from aviflow.backends.kubernetes import KubernetesBackend
from aviflow.bundle import build_bundle
from aviflow.errors import BackendUnavailable
from aviflow.operator._orphans import Submissions
from aviflow.records import EventType, JobState, Owner
from aviflow.spec import TrainJob
from aviflow.store import RunDir, RunStore

JOB = TrainJob.from_dict({"metadata": {"name": "p"}, "spec": {"script": "1"}})
NOW = time.time()


class Cache:
    """A TrainJob informer's ``get``."""

    def __init__(self, objs: dict[str, dict[str, Any]]) -> None:
        self.objs = objs

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objs.get(name)


def pending(store: RunStore, token: str, age: float, namespace: str = "ml") -> RunDir:
    run = store.create(JOB, {}, "alice", backend="kubernetes", origin={"namespace": namespace},
                       submission=token)  # fmt: skip
    mark = store.pending_dir / run.id
    os.utime(mark, (NOW - age, NOW - age))
    return run


def trainjob(token: str | None) -> dict[str, Any]:
    annotations = {"aviflow.dev/submission": token} if token else {}
    return {"metadata": {"annotations": annotations}}


def test_only_old_submissions_without_their_own_trainjob_fail(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    young = pending(store, "t-young", age=10)
    lost = pending(store, "t-lost", age=900)
    cached = pending(store, "t-cached", age=900)  # its TrainJob is in the cache
    behind = pending(store, "t-behind", age=900)  # on the API server, not in the cache yet
    taken = pending(store, "t-taken", age=900)  # another TrainJob holds its name
    elsewhere = pending(store, "t-other", age=900, namespace="other")  # not this controller's
    broken = pending(store, "t-broken", age=950)
    broken.meta_path.write_text("{not json")
    gone = pending(store, "t-gone", age=990)
    os.rename(gone.path, tmp_path / "moved-away")
    api = {behind.id: trainjob("t-behind"), taken.id: trainjob(None)}
    asked: list[str] = []

    def fetch(namespace: str, name: str) -> dict[str, Any] | None:
        asked.append(name)
        return api.get(name)

    sweep = Submissions(
        store, {"ml": Cache({cached.id: trainjob("t-cached")})}, fetch, lambda: None, 600
    )
    assert sorted(sweep.sweep(NOW)) == sorted([lost.id, taken.id])
    assert sorted(asked) == sorted([lost.id, behind.id, taken.id])  # the cache first
    for run, what in (
        (lost, f"none named {lost.id} in ml "),
        (taken, f"the TrainJob named {taken.id} in ml is another one"),
    ):
        status = run.status()
        assert status.state is JobState.FAILED
        assert status.message.startswith(
            f"the submission did not complete: its TrainJob was never created ({what}"
        )
        assert [e.type for e in run.events().items] == [EventType.QUEUED, EventType.FAILED]
    for run in (young, cached, behind, elsewhere):
        assert run.events().items == [] and run.status().state is JobState.QUEUED
    # settled: the failed ones and the one whose directory went; the rest are still pending
    # (the broken one too: logged, tried again at the next sweep, never holding the others)
    left = {job_id for job_id, _ in store.pending()}
    assert left == {young.id, cached.id, behind.id, elsewhere.id, broken.id}
    assert sweep.sweep(NOW) == []


def test_a_job_id_another_request_is_writing_is_a_503_to_try_again(tmp_path: Path) -> None:
    b = KubernetesBackend.from_config({"image": "trainer:1", "runs": {"localPath": str(tmp_path)}})
    b.store.index_dir.mkdir(parents=True)
    os.symlink("../alice/p-0000beef", b.store.index_dir / "p-0000beef")  # reserved just now
    with pytest.raises(BackendUnavailable, match="p-0000beef is being submitted by another"):
        b.submit(JOB, build_bundle(JOB), Owner("alice"), job_id="p-0000beef")
    assert b.list_ids() == [] and b.store.pending() == []  # no API server was asked


def test_directories_from_before_the_marks_are_marked_once_and_swept(tmp_path: Path) -> None:
    """An upgrade from a version without pending marks: the first sweep marks, as of their
    submission, the jobs of its namespaces that nothing took up, and fails the old ones."""
    store = RunStore(tmp_path)

    def earlier(namespace: str = "ml", backend: str = "kubernetes") -> RunDir:
        run = store.create(JOB, {}, "alice", backend=backend, origin={"namespace": namespace})
        meta = run.read_json(run.meta_path, {})
        run.meta_path.write_text(json.dumps({**meta, "submitted": NOW - 3600}))
        return run

    stranded, taken_up, theirs, local = (
        earlier(),
        earlier(),
        earlier("other"),
        earlier(backend="local"),
    )
    (taken_up.path / "k8s.json").write_text("{}")  # bound by a TrainJob
    fresh = pending(store, "t-fresh", age=10)  # written with its mark: left as it is
    sweep = Submissions(store, {"ml": Cache({})}, lambda ns, name: None, lambda: None, 600)
    assert sweep.sweep(NOW) == [stranded.id]
    assert stranded.status().state is JobState.FAILED
    assert [e.type for e in stranded.events().items] == [EventType.QUEUED, EventType.FAILED]
    for run in (taken_up, theirs, local, fresh):
        assert run.events().items == [], run.id
    assert [i for i, _ in store.pending()] == [fresh.id]
    assert (tmp_path / ".pending-marked").exists()
    # once per store: a directory like it written now is not marked by later sweeps
    late = earlier()
    assert sweep.sweep(NOW) == [] and late.events().items == []
