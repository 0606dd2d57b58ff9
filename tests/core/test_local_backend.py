"""Local backend bookkeeping that needs no training process."""

from __future__ import annotations

import json
import shutil
import time

import psutil

import aviflow
from aviflow import _procs
from aviflow.backends.local import SUPERVISOR_INFO, LocalBackend
from aviflow.bundle import build_bundle
from aviflow.spec import TrainJob
from aviflow.status import Event, JobState


def test_a_job_being_submitted_is_not_mistaken_for_an_orphan(local_backend):
    # what submit() has written before the supervisor takes its lock
    job = TrainJob.from_dict({"metadata": {"name": "early"}, "spec": {"script": "pass"}})
    run = local_backend.store.create(job, build_bundle(job).store_files(), {"backend": "local"})
    run.record(Event(JobState.QUEUED, attempt=0))
    assert local_backend.status(run.id)["state"] == "QUEUED"
    meta = run.meta()
    meta["submitted"] -= 3600  # an hour later, still no supervisor: it is an orphan
    run.write_meta(meta)
    assert local_backend.status(run.id)["state"] == "FAILED"
    assert (
        local_backend.status(run.id)["message"]
        == "the job supervisor exited unexpectedly; see supervisor.log"
    )


def test_a_supervisor_whose_run_directory_is_removed_exits(run_root, leftover_processes):
    backend = LocalBackend(root=run_root, capacity=1)
    # two jobs: the second waits in the queue behind the first, which never starts training
    first = aviflow.submit(
        {
            "metadata": {"name": "blocker"},
            "spec": {"command": ["python", "-c", "import time; time.sleep(600)"]},
        },
        backend=backend,
    )
    second = aviflow.submit(
        {"metadata": {"name": "waiter"}, "spec": {"script": "pass"}}, backend=backend
    )
    pids = [backend.run_dir(j.id).path / SUPERVISOR_INFO for j in (first, second)]
    supervisors = [int(json.loads(p.read_text())["pid"]) for p in pids]
    shutil.rmtree(run_root)
    deadline = time.monotonic() + 60
    while any(_alive(pid) for pid in supervisors) or _procs.tagged(first.id):
        assert time.monotonic() < deadline, "supervisors or job processes outlived their run store"
        time.sleep(0.2)
    assert leftover_processes(first.id) == [] and leftover_processes(second.id) == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
