"""Who a TrainJob belongs to and what it may resume from, as the controller decides them
from the run store's control part (pure: a temporary run store, no cluster)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aviflow.operator._binding import Binder, kubectl_owner, resume_refusal
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


def trainjob(name: str, uid: str, age: float = 3600.0, **annotations: str) -> dict[str, Any]:
    made = datetime.fromtimestamp(time.time() - age, tz=UTC)
    return {
        "apiVersion": "aviflow.dev/v1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": uid,
            "creationTimestamp": made.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "annotations": {f"aviflow.dev/{k}": v for k, v in annotations.items()},
        },
        "spec": {"script": "1"},
    }


def test_a_submitted_directory_binds_only_to_the_trainjob_with_its_token(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    refused: list[tuple[str, str]] = []
    binder = Binder(store, lambda cr, why: refused.append((cr["metadata"]["uid"], why)))
    run = store.create(job(), {}, "alice", backend="kubernetes", origin={"namespace": "ml"},
                       submission="s3cret")  # fmt: skip
    # a TrainJob of that name made by someone else (kubectl), before aviflow-api's own
    squatter = trainjob(run.id, "u-bob", user="bob")
    assert binder.run_dir(squatter) is None
    assert refused == [("u-bob", f"job id {run.id!r} belongs to another job in the run store")]
    assert [i for i, _ in store.pending()] == [run.id]  # still waiting for its own
    bound = binder.run_dir(trainjob(run.id, "u-alice", user="alice", submission="s3cret"))
    assert bound is not None and bound.path == run.path and store.pending() == []
    assert binder.run_dir(squatter) is None and len(refused) == 2  # bound: by uid from now on


def test_a_trainjob_of_aviflow_api_without_its_directory_is_never_adopted(tmp_path: Path) -> None:
    store = RunStore(tmp_path)
    refused: list[tuple[str, str]] = []
    binder = Binder(store, lambda cr, why: refused.append((cr["metadata"]["name"], why)))
    young = trainjob("lost-0000beef", "u1", age=1, user="alice", submission="t")
    assert binder.run_dir(young) is None and refused == []  # its directory may not show yet
    old = trainjob("lost-0000beef", "u1", user="alice", submission="t")
    assert binder.run_dir(old) is None
    driven = {**trainjob("gone-0000beef", "u2", age=1, user="dave"), "status": {"state": "RUNNING"}}
    assert binder.run_dir(driven) is None
    assert refused == [
        (
            name,
            f"job {name}'s run directory is not in the run store (its submission did not "
            "complete, or the directory was removed): nothing runs; delete the TrainJob and "
            "submit the job again",
        )
        for name in ("lost-0000beef", "gone-0000beef")
    ]
    assert store.ids() == []  # neither became kubectl:alice's (nor kubectl:dave's) job
