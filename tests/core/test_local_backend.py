"""Local backend bookkeeping that needs no training process."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import psutil
import pytest

import aviflow
from aviflow import _procs
from aviflow.backends.local import LocalBackend
from aviflow.bundle import build_bundle
from aviflow.errors import BackendError
from aviflow.lifecycle import Lifecycle, Policy
from aviflow.records import EventType, JobState, PendingJob, QueueQuota
from aviflow.spec import TrainJob

ORPHAN = "the job supervisor exited unexpectedly; see supervisor.log"


def test_a_job_being_submitted_is_not_mistaken_for_an_orphan(local_backend):
    # what submit() has written before the supervisor takes its lock
    job = TrainJob.from_dict({"metadata": {"name": "early"}, "spec": {"script": "pass"}})
    run = local_backend.store.create(job, build_bundle(job).store_files(), "ada")
    step = Lifecycle(Policy()).submitted(time.time())
    run.record(step.events, step.lifecycle.status())
    assert local_backend.status(run.id).state is JobState.QUEUED
    assert local_backend.reconcile() == []
    meta = json.loads(run.meta_path.read_text())
    meta["submitted"] -= 3600  # an hour later, still no supervisor: it is an orphan
    run.meta_path.write_text(json.dumps(meta))
    # status() is a plain read: it shows the orphan as FAILED and writes nothing
    status = local_backend.status(run.id)
    assert (status.state, status.message) == (JobState.FAILED, ORPHAN)
    assert run.status().state is JobState.QUEUED
    assert [e.type for e in run.events().items] == [EventType.QUEUED]
    # reconciling records it, once
    assert local_backend.reconcile() == [run.id]
    assert local_backend.reconcile() == []
    assert [e.type for e in run.events().items] == [EventType.QUEUED, EventType.FAILED]
    assert (run.status().state, run.status().message) == (JobState.FAILED, ORPHAN)


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
    pids = [backend.run_dir(j.id).supervisor_info for j in (first, second)]
    supervisors = [int(json.loads(p.read_text())["pid"]) for p in pids]
    deadline = time.monotonic() + 60
    while run_root.exists():  # the supervisors may still write a file while it goes
        shutil.rmtree(run_root, ignore_errors=True)
        assert time.monotonic() < deadline, "the run store could not be removed"
    while any(_alive(pid) for pid in supervisors) or _procs.tagged(first.id):
        assert time.monotonic() < deadline, "supervisors or job processes outlived their run store"
        time.sleep(0.2)
    assert leftover_processes(first.id) == [] and leftover_processes(second.id) == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _gated(name: str, queue: str, gate: Path | None = None) -> dict:
    """A 1 x 2 job in ``queue`` that runs until ``gate`` exists (or ends at once)."""
    wait = f"while not os.path.exists({str(gate)!r}): time.sleep(0.1)" if gate else "pass"
    return {
        "metadata": {"name": name},
        "spec": {
            "queue": queue,
            "gpusPerNode": 2,
            "command": ["python", "-c", f"import os, time\n{wait}\n"],
        },
    }


def _wait_state(job, state: JobState, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while job.status != state:
        assert not job.status.is_finished() or state.is_finished(), job.status_record()
        assert time.monotonic() < deadline, f"{job.id} still {job.status}, not {state}"
        time.sleep(0.1)


def test_queue_quota_holds_its_jobs_back_but_not_other_queues(
    run_root, tmp_path, leftover_processes
):
    backend = LocalBackend(root=run_root, capacity=8, quotas={"vision": 2})
    gate = tmp_path / "release"
    first = aviflow.submit(_gated("first", "vision", gate), backend=backend)
    _wait_state(first, JobState.RUNNING)
    second = aviflow.submit(_gated("second", "vision"), backend=backend)
    other = aviflow.submit(_gated("other", "nlp"), backend=backend)

    # the machine has room (2/8 in use) but queue vision is at its quota; nlp has none
    assert other.wait(timeout=120) == JobState.SUCCEEDED
    record = second.status_record()
    assert (record.state, record.queue_position, record.message) == (
        JobState.QUEUED,
        1,
        "waiting for queue 'vision' quota: needs 2 GPUs, 2/2 in use (position 1)",
    )
    user = first.meta.user
    assert backend.quota("vision") == QueueQuota(
        "vision", 2, gpus_in_use=2, pending_count=1, pending=(PendingJob(second.id, user, 1, 2),)
    )
    assert backend.quota("nlp") is None
    assert [q.queue for q in backend.queues()] == ["vision"]

    gate.touch()
    assert first.wait(timeout=120) == JobState.SUCCEEDED
    assert second.wait(timeout=120) == JobState.SUCCEEDED
    second_start = next(e.time for e in second.events() if e.type is EventType.STARTING)
    assert second_start >= first.events()[-1].time
    assert [leftover_processes(j.id) for j in (first, second, other)] == [[], [], []]


def test_a_job_larger_than_its_queue_quota_is_refused_and_nothing_is_created(run_root):
    backend = LocalBackend(root=run_root, capacity=8, quotas={"vision": 2})
    spec = _gated("big", "vision")
    spec["spec"]["nodes"] = 2
    with pytest.raises(BackendError) as err:
        aviflow.submit(spec, backend=backend)
    assert str(err.value) == (
        "'big' needs 4 GPUs but queue 'vision' has a quota of 2; "
        "lower spec.nodes/gpusPerNode or use another queue"
    )
    assert backend.list_ids() == []
    # the quotas belong to the run store: a backend opened on it without quotas applies them
    with pytest.raises(BackendError, match="has a quota of 2"):
        aviflow.submit(spec, backend=LocalBackend(root=run_root, capacity=8))
    assert backend.list_ids() == []


def test_quotas_must_be_gpu_counts(run_root):
    with pytest.raises(
        BackendError, match=r"queue quotas must be GPU counts >= 0, got \{'a': -1\}"
    ):
        LocalBackend(root=run_root, quotas={"a": -1})


def test_secrets_are_refused_locally_before_anything_is_written(local_backend):
    job = TrainJob.from_dict(
        {"metadata": {"name": "s"}, "spec": {"script": "pass", "secrets": ["hf-token"]}}
    )
    with pytest.raises(BackendError, match=r"spec.secrets \(hf-token\) are Kubernetes Secrets"):
        local_backend.submit(job, build_bundle(job))
    assert local_backend.list_ids() == []


def test_request_cancel_answers_at_once_and_the_supervisors_end_the_jobs(
    run_root, leftover_processes
):
    backend = LocalBackend(root=run_root, capacity=1)
    sleeper = {"spec": {"command": ["python", "-c", "import time; time.sleep(600)"]}}
    running = aviflow.submit({**sleeper, "metadata": {"name": "running"}}, backend=backend)
    queued = aviflow.submit({**sleeper, "metadata": {"name": "queued"}}, backend=backend)
    deadline = time.monotonic() + 60
    while backend.status(running.id).state is not JobState.RUNNING:
        assert time.monotonic() < deadline, backend.status(running.id)
        time.sleep(0.1)
    for job in (running, queued):
        asked = time.monotonic()
        assert backend.request_cancel(job.id, by="ada") is True
        assert time.monotonic() - asked < 5  # it asks; the supervisor does the rest
    for job in (running, queued):
        assert job.wait(timeout=60) is JobState.CANCELLED
        assert backend.status(job.id).message == "cancelled by ada"
        assert backend.events(job.id).items[-1].message == "cancelled by ada"
        assert backend.request_cancel(job.id, by="ada") is False  # already finished
        assert backend.cancel(job.id) is False
    deadline = time.monotonic() + 30
    while leftover_processes(running.id):
        assert time.monotonic() < deadline, leftover_processes(running.id)
        time.sleep(0.1)


def test_a_job_whose_supervisor_dies_after_a_cancel_request_is_recorded_as_cancelled(
    local_backend,
):
    job = TrainJob.from_dict({"metadata": {"name": "asked"}, "spec": {"script": "pass"}})
    run = local_backend.store.create(job, build_bundle(job).store_files(), "ada")
    step = Lifecycle(Policy()).submitted(time.time())
    run.record(step.events, step.lifecycle.status())
    supervisor = _procs.FileLock(run.supervisor_lock)  # a supervisor, alive
    assert supervisor.acquire(blocking=False)
    run.supervisor_info.write_text(json.dumps({"started": time.time()}))  # no pid to signal
    assert local_backend.request_cancel(run.id, by="bob") is True
    assert run.cancel_request.read_text() == "cancelled by bob"
    assert local_backend.reconcile() == []  # its supervisor has the request
    supervisor.release()  # ... and dies before acting on it
    assert local_backend.reconcile() == [run.id]
    status = run.status()
    assert (status.state, status.message) == (JobState.CANCELLED, "cancelled by bob")
    assert [e.type for e in run.events().items] == [EventType.QUEUED, EventType.CANCELLED]
    assert local_backend.request_cancel(run.id) is False


# each rank of a 1 x 2 job prints 1,000,000 bytes in ten bursts (its wrapper execs this
# command, so no thread of ours stays in the rank: its node's launcher caps the log)
LOUD = """
import os, sys, time
rank = os.environ["RANK"]
for burst in range(10):
    for i in range(2000):
        print(f"rank {rank} burst {burst} line {i:04d} " + "x" * 24)
    time.sleep(0.3)
print(f"rank {rank} done")
"""


def test_a_job_that_prints_more_than_its_log_cap_ends_within_it(run_root, leftover_processes):
    backend = LocalBackend(root=run_root, capacity=2, rank_log_cap="256Ki")  # 128Ki a rank
    job = aviflow.submit(
        {
            "metadata": {"name": "loud"},
            "spec": {"gpusPerNode": 2, "command": ["python", "-c", LOUD]},
        },
        backend=backend,
    )
    assert job.wait(timeout=120) == JobState.SUCCEEDED, job.status_record()
    run = backend.run_dir(job.id)
    for rank in (0, 1):
        live, old = run.rank_log(rank).read_bytes(), run.rank_log_previous(rank).read_bytes()
        assert len(live) + len(old) <= 131_072 and 0 < len(old) <= 65_536
        # the live log starts with the marker and still ends with the rank's last lines
        assert live.startswith(b"=== aviflow: log rotated: ")
        assert live.endswith(
            f"rank {rank} burst 9 line 1999 {'x' * 24}\nrank {rank} done\n".encode()
        )
        # readers: the tail through the backend; offsets count what was rotated away too
        # (the rank wrote 1,000,000+ bytes; a cut in place loses what lands during the cut,
        # as logrotate's copytruncate does: a few lines under load, so not an exact count)
        chunk = backend.log(job.id, rank, tail=2)
        assert chunk.text.endswith(f"rank {rank} done\n") and chunk.size > 900_000
    assert [n for n in run.logs_dir.iterdir() if n.name.endswith(".tmp")] == []
    assert b"not capped" not in run.node_log(0).read_bytes()
    assert leftover_processes(job.id) == []


def test_a_submission_with_its_id_again_is_the_same_job(local_backend):
    from aviflow.records import Owner
    from aviflow.store import new_job_id

    job = TrainJob.from_dict({"metadata": {"name": "again"}, "spec": {"script": "pass"}})
    chosen = new_job_id(job.slug)
    ada = Owner("ada", "vision")
    first = local_backend.submit(job, build_bundle(job), ada, job_id=chosen)
    assert first == chosen
    assert local_backend.submit(job, build_bundle(job), ada, job_id=chosen) == chosen
    assert local_backend.list_ids() == [chosen]
    with pytest.raises(BackendError, match=f"job id '{chosen}' is another job's"):
        local_backend.submit(job, build_bundle(job), Owner("bob", "vision"), job_id=chosen)
    assert aviflow.Job(chosen, local_backend).wait(timeout=60) is JobState.SUCCEEDED
