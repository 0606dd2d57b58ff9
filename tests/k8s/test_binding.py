"""Who a TrainJob belongs to and what it may resume from, as the controller decides them
from the run store's control part (pure: a temporary run store, no cluster)."""

from __future__ import annotations

from pathlib import Path

from aviflow.operator._binding import kubectl_owner, resume_refusal
from aviflow.spec import TrainJob
from aviflow.store import RunStore


def job(resume: str | None = None) -> TrainJob:
    spec: dict[str, object] = {"script": "1"}
    if resume is not None:
        spec["resumeFrom"] = {"job": resume, "step": 10}
    return TrainJob.from_dict({"metadata": {"name": "t"}, "spec": spec})


def test_kubectl_owners_cannot_be_hub_users_or_each_other() -> None:
    assert kubectl_owner("ml", "dave") == "kubectl:dave"
    assert (
        kubectl_owner("ml", "system:serviceaccount:ml:ci") == "kubectl:system:serviceaccount:ml:ci"
    )
    for missing in (None, "", 7, "x" * 254):
        assert kubectl_owner("ml", missing) == "kubectl-namespace:ml"
    assert kubectl_owner("dave", None) != kubectl_owner("ml", "dave")


def test_a_job_resumes_only_from_its_owners_or_its_teams_jobs(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    alices = store.create(job(), {}, "alice", team="vision").id
    carols = store.create(job(), {}, "carol", team="nlp").id
    loners = store.create(job(), {}, "kubectl:dave").id
    assert resume_refusal(store, job(), "bob", None) is None  # nothing to resume
    assert resume_refusal(store, job(alices), "alice", None) is None  # the owner
    assert resume_refusal(store, job(alices), "bob", "vision") is None  # the team
    assert resume_refusal(store, job(loners), "kubectl:dave", "nlp") is None
    refused = {
        (carols, "bob", "vision"): "bob's or team vision's",
        (alices, "kubectl:dave", None): "kubectl:dave's",
        (loners, "erin", "vision"): "erin's or team vision's",
        ("no-such-job-1234", "alice", "vision"): "alice's or team vision's",
    }
    for (source, user, team), whose in refused.items():
        assert resume_refusal(store, job(source), user, team) == (
            f"spec.resumeFrom: there is no job {source!r} of {whose} to resume from (a job "
            "resumes only from its owner's or its team's checkpoints)"
        )
    # a job without a team never resumes from another teamless owner's job
    assert resume_refusal(store, job(loners), "kubectl:erin", None) is not None
