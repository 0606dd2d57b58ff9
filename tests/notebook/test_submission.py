"""What the magic ships: dry-run reports, notebook variables, origin and ``--resume``.

Nothing here starts a training process: dry runs write nothing, and ``--resume`` is
resolved against jobs written into the run store the way the runtime writes them.
"""

from __future__ import annotations

from pathlib import Path

import cloudpickle
import pytest
from IPython.core.error import UsageError

from aviflow.backends.local import LocalBackend
from aviflow.records import CheckpointRef, FailureInfo, JobState, QueueQuota
from aviflow.spec import TrainJob
from aviflow_magics._dryrun import DryRun, dry_run, spec_yaml
from aviflow_magics._options import OptionError
from aviflow_magics._resume import find_resume_checkpoint
from aviflow_magics._vars import pickle_vars

BODY = "import os\nprint(os.getpid())\n"


def _empty(root: Path) -> bool:
    return not root.exists() or not any(root.iterdir())


def test_dry_run_shows_spec_and_gpu_hours_and_submits_nothing(shell, run_root: Path) -> None:
    shell.user_ns["__session__"] = "/home/ada/work/train-bert.ipynb"
    shell.user_ns["cfg"] = {"lr": 0.1}
    result = shell.run_cell(
        f"%%aviflow_train --nodes 2 --gpus-per-node 8 --time-limit 90m --vars cfg --dry-run\n{BODY}",
        cell_id="cell-7",
    )
    report = result.result
    assert isinstance(report, DryRun)
    assert report.gpu_hours == 24.0
    assert report.origin["notebook"] == "/home/ada/work/train-bert.ipynb"
    assert report.origin["cell_id"] == "cell-7"
    assert report.origin["cell_hash"].startswith("sha256:")
    assert set(report.files) == {"train.py", "vars.pkl"}
    lines = report.text().splitlines()
    assert lines[:3] == [
        "Dry run of 'train-bert' on backend 'local': nothing was submitted.",
        "GPU-hours requested: 2 nodes x 8 GPUs x 90m = 24 GPU-hours",
        "Quota of queue 'default': not known to this backend",
    ]
    spec_text = report.text().split("--- spec ---\n")[1].split("\n\n--- manifests ---")[0]
    assert TrainJob.from_yaml(spec_text) == report.job
    # the local backend renders what each node would run
    manifests = report.text().split("--- manifests ---\n")[1]
    assert "argv:" in manifests and "AVIFLOW_NUM_NODES: '2'" in manifests
    assert report.job.spec.script == BODY
    assert _empty(run_root)


def test_dry_run_without_time_limit_is_unbounded(shell, run_root: Path) -> None:
    report = shell.run_cell_magic("aviflow_train", "--nodes 3 --dry-run", BODY)
    assert report.gpu_hours is None
    assert (
        report.text().splitlines()[1]
        == "GPU-hours requested: 3 nodes x 1 GPUs x no timeLimit = unbounded (3 GPUs while it runs)"
    )
    assert _empty(run_root)


class ClusterLikeBackend(LocalBackend):
    """A backend that can also render the objects it would create and tell a quota."""

    name = "cluster-like"

    def render(self, job: TrainJob) -> list[dict]:
        return [
            {"kind": "Service", "metadata": {"name": job.slug}},
            {"kind": "Job", "spec": {"completions": job.spec.nodes}},
        ]

    def quota(self, queue: str) -> QueueQuota:
        return QueueQuota(queue, 32, gpus_in_use=16, pending_count=3)


def test_dry_run_shows_manifests_and_quota_when_the_backend_offers_them(run_root: Path) -> None:
    job = TrainJob.from_dict(
        {
            "metadata": {"name": "big run"},
            "spec": {"nodes": 2, "gpusPerNode": 8, "timeLimit": "1h", "script": BODY},
        }
    )
    report = dry_run(job, ClusterLikeBackend(root=run_root), {"train.py": BODY.encode()})
    text = report.text()
    assert "Quota of queue 'default': 32 GPUs, 16 in use, 3 job(s) waiting\n" in text
    assert text.split("--- manifests ---\n")[1] == (
        f"kind: Service\nmetadata:\n  name: {job.slug}\n---\nkind: Job\nspec:\n  completions: 2\n"
    )
    assert _empty(run_root)


def test_dry_run_on_the_local_backend_shows_its_queue_quota(run_root: Path) -> None:
    job = TrainJob.from_dict(
        {"metadata": {"name": "q"}, "spec": {"queue": "vision", "script": BODY}}
    )
    backend = LocalBackend(root=run_root, quotas={"vision": 4})
    report = dry_run(job, backend, {"train.py": BODY.encode()})
    assert "Quota of queue 'vision': 4 GPUs, 0 in use, 0 job(s) waiting\nStart: fits now\n" in (
        report.text()
    )
    assert backend.list_ids() == []


def test_spec_yaml_round_trips_scripts() -> None:
    for script in ("a = 1\n", "x\n  y  \n\tz", "only\n\n\nblank lines\n"):
        job = TrainJob.from_dict({"metadata": {"name": "s"}, "spec": {"script": script}})
        assert TrainJob.from_yaml(spec_yaml(job)) == job


def test_vars_are_cloudpickled_including_notebook_functions() -> None:
    class Config:
        lr = 0.25

    def schedule(step: int) -> float:
        return Config.lr / step

    data = pickle_vars(["schedule", "items"], {"schedule": schedule, "items": [1, 2], "other": 3})
    loaded = cloudpickle.loads(data)
    assert sorted(loaded) == ["items", "schedule"]
    assert loaded["schedule"](2) == 0.125 and loaded["items"] == [1, 2]


def test_unpicklable_var_is_named() -> None:
    import threading

    with pytest.raises(OptionError) as raised:
        pickle_vars(
            ["ok", "gen"], {"ok": 1, "gen": (i for i in range(3)), "lock": threading.Lock()}
        )
    assert (
        str(raised.value)
        == "--vars: cannot ship 'gen' (generator): cannot pickle 'generator' object"
    )


def test_resume_never_and_auto_without_history(local_backend: LocalBackend) -> None:
    origin = {"notebook": "a.ipynb", "cell_id": "c1"}
    assert find_resume_checkpoint(local_backend, "never", "x", origin) is None
    assert find_resume_checkpoint(local_backend, "auto", "x", origin) is None


def test_resume_auto_picks_the_latest_checkpoint_of_the_same_name_or_cell(
    make_job, local_backend: LocalBackend
) -> None:
    older = make_job(JobState.SUCCEEDED, name="bert", checkpoints=(10, 20))
    make_job(JobState.SUCCEEDED, name="other", checkpoints=(50,))
    same_cell = make_job(
        JobState.FAILED,
        name="renamed",
        checkpoints=(30,),
        origin={"notebook": "a.ipynb", "cell_id": "c1"},
    )
    make_job(JobState.FAILED, name="bert", checkpoints=())  # newest of that name, no checkpoint
    by_name = find_resume_checkpoint(
        local_backend, "auto", "bert", {"notebook": "b.ipynb", "cell_id": "zz"}
    )
    assert by_name == CheckpointRef(older.id, 20)
    by_cell = find_resume_checkpoint(
        local_backend, "auto", "new-name", {"notebook": "a.ipynb", "cell_id": "c1"}
    )
    assert by_cell == CheckpointRef(same_cell.id, 30)


def test_resume_job_id(make_job, local_backend: LocalBackend) -> None:
    done = make_job(JobState.SUCCEEDED, name="a", checkpoints=(5,))
    empty = make_job(JobState.SUCCEEDED, name="b")
    assert find_resume_checkpoint(local_backend, done.id, "x", {}) == CheckpointRef(done.id, 5)
    with pytest.raises(OptionError) as raised:
        find_resume_checkpoint(local_backend, empty.id, "x", {})
    assert (
        str(raised.value) == f"--resume: job {empty.id!r} has no complete checkpoint to start from"
    )


def test_resume_ships_the_checkpoint_in_the_dry_run(shell, make_job, run_root: Path) -> None:
    done = make_job(JobState.SUCCEEDED, name="bert", checkpoints=(7,))
    before = sorted(p.name for p in run_root.iterdir())
    report = shell.run_cell_magic("aviflow_train", "--name bert --resume auto --dry-run", BODY)
    start = report.job.spec.resume_from
    assert (start.job, start.step) == (done.id, 7)
    assert f"Starts from checkpoint step 7 of job {done.id}" in report.text()
    assert f"resumeFrom:\n    job: {done.id}\n    step: 7\n" in report.text()
    assert sorted(p.name for p in run_root.iterdir()) == before
    fresh = shell.run_cell_magic("aviflow_train", "--name nobody --resume auto --dry-run", BODY)
    assert fresh.job.spec.resume_from is None
    assert (
        "--resume auto: no previous checkpoint of this cell or name; starts fresh" in fresh.text()
    )


def test_attach_unknown_job_is_one_line(shell, run_root: Path) -> None:
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("aviflow_attach", "nope-12345678")
    assert (
        str(raised.value)
        == f"no job 'nope-12345678' in {run_root}; `aviflow ls` lists the jobs there"
    )
    with pytest.raises(UsageError) as bad:
        shell.run_line_magic("aviflow_attach", "")
    assert str(bad.value) == "%aviflow_attach: the following arguments are required: job_id"


def test_jobs_table_lists_newest_first(shell, make_job) -> None:
    first = make_job(JobState.SUCCEEDED, name="first")
    second = make_job(JobState.FAILED, name="second", failure=FailureInfo(rank=1, node=0))
    table = shell.run_line_magic("aviflow_jobs", "")
    assert [r["id"] for r in table.rows] == [second.id, first.id]
    assert [r["state"] for r in table.rows] == ["FAILED", "SUCCEEDED"]
    assert [r["GPUs"] for r in table.rows] == ["2x2", "2x2"]
    assert [r["elapsed"] for r in table.rows] == ["1m 00s", "1m 00s"]
    html = table._repr_html_()
    assert html.count("class='aviflow-job-row'") == 2
    assert shell.run_line_magic("aviflow_jobs", "--limit 1").rows[0]["id"] == second.id
    text = table.text().splitlines()
    assert text[0].split() == [
        "id",
        "name",
        "state",
        "GPUs",
        "submitted",
        "elapsed",
        "GPU-h",
        "origin",
    ]


def test_resume_from_is_read_by_the_training_side(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make_job, local_backend: LocalBackend
) -> None:
    from aviflow import tracking
    from aviflow.store import RunStore

    old = make_job(JobState.SUCCEEDED, name="old", checkpoints=(40,))
    spec = TrainJob.from_dict(
        {
            "metadata": {"name": "new"},
            "spec": {"script": "pass", "resumeFrom": {"job": old.id, "step": 40}},
        }
    )
    run = local_backend.store.create(spec, {}, "tester")
    monkeypatch.setenv("AVIFLOW_RUN_DIR", str(run.path))
    assert tracking.init_checkpoint() == CheckpointRef(old.id, 40)
    assert tracking.checkpoint_path(CheckpointRef(old.id, 40)) == RunStore(
        local_backend.store.root
    ).get(old.id).checkpoint_dir(40)

    class Recorder:
        def __init__(self) -> None:
            self.loaded: list[str] = []

        def load_state(self, path: str) -> None:
            self.loaded.append(path)

    acc = Recorder()
    assert tracking.resume(acc) == 40  # type: ignore[arg-type]
    assert acc.loaded == [str(old.checkpoint_path())]
    monkeypatch.setenv("AVIFLOW_RUN_DIR", str(tmp_path / "outside"))
    assert tracking.init_checkpoint() is None
