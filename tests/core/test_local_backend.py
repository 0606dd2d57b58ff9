"""Local backend bookkeeping that needs no training process."""

from __future__ import annotations

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
