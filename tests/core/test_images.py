"""Trainer images: the configured list (``ClusterSettings.images``), what ``--image`` picks,
the notebook-versus-image version check, and what each job records (``JobMeta.image``)."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

import pytest

import aviflow
from aviflow.backends.local import LocalBackend
from aviflow.errors import BackendError, SpecError
from aviflow.images import VersionMismatch, find, mismatches, pick, this_python, warning
from aviflow.k8s.settings import ClusterSettings
from aviflow.records import JobMeta, JobState, TrainerImage

NEW = {
    "name": "cuda12",
    "image": "reg.example.com/aviflow/trainer:0.2.0-abcdef012345",
    "lockHash": "abcdef012345",
    "packages": {"torch": "2.15.0", "accelerate": "1.15.0", "aviflow": "0.2.0"},
}
OLD = {
    "name": "cuda11",
    "image": "reg.example.com/aviflow/trainer:0.1.0-0123456789ab",
    "lockHash": "0123456789ab",
    "packages": {"torch": "2.14.0", "accelerate": "1.14.0", "aviflow": "0.1.0"},
}


def test_the_record_round_trips_and_describes_itself() -> None:
    image = TrainerImage.from_dict(NEW)
    assert image.to_dict() == NEW
    assert image.describe() == (
        "cuda12 (reg.example.com/aviflow/trainer:0.2.0-abcdef012345, lock abcdef012345)"
    )
    assert TrainerImage("local").describe() == "local"
    meta = JobMeta("j-1", "j", "alice", 1.0, image=image)
    assert JobMeta.from_dict(meta.to_dict()) == meta
    assert "image" not in JobMeta("j-1", "j", "alice", 1.0).to_dict()  # an older meta.json
    assert JobMeta.from_dict({"id": "j-1"}).image is None


def test_pick_takes_a_name_or_a_reference_and_names_the_choices() -> None:
    images = [TrainerImage.from_dict(NEW), TrainerImage.from_dict(OLD)]
    assert pick(images, None).name == "cuda12"  # the first is the default
    assert pick(images, "cuda11").name == "cuda11"
    assert pick(images, OLD["image"]).name == "cuda11"
    assert find(images, "nope") is None and find([], None) is None
    with pytest.raises(SpecError) as err:
        pick(images, "reg.example.com/other:1")
    assert err.value.problems == [
        "spec.image: 'reg.example.com/other:1' is not a configured trainer image; choose one "
        f"of: cuda12 ({NEW['image']}, lock abcdef012345), cuda11 ({OLD['image']}, lock "
        "0123456789ab)"
    ]
    with pytest.raises(SpecError, match="this backend offers no trainer image"):
        pick([], None)


def test_mismatches_name_each_package_with_both_versions() -> None:
    old = TrainerImage.from_dict(OLD)
    here = {"torch": "2.15.0+cpu", "accelerate": "1.14.0", "aviflow": None}
    found = mismatches(old, here)
    assert found == [
        VersionMismatch("torch", "2.15.0+cpu", "2.14.0"),
        VersionMismatch("aviflow", None, "0.1.0"),
    ]
    assert [str(m) for m in found] == [
        "torch 2.15.0+cpu here, 2.14.0 in the image",
        "aviflow not installed here, 0.1.0 in the image",
    ]
    assert warning(old, found) == (
        f"warning: this notebook's packages differ from trainer image cuda11 ({OLD['image']}, "
        "lock 0123456789ab):\n"
        "  torch 2.15.0+cpu here, 2.14.0 in the image\n"
        "  aviflow not installed here, 0.1.0 in the image\n"
        "the job runs with the image's versions; install those here (pip install "
        "torch==2.14.0 aviflow==0.1.0) or pick another image with --image"
    )
    # a local label names a build of the same release; an unpinned package is not compared
    assert (
        mismatches(old, {"torch": "2.14.0+cu124", "accelerate": "1.14.0+x", "aviflow": "0.1.0"})
        == []
    )
    assert mismatches(TrainerImage("bare", "x:1"), {"torch": None}) == []
    assert warning(old, []) == ""


def test_cluster_settings_resolve_names_and_references() -> None:
    s = ClusterSettings.from_dict({"images": [NEW, OLD], "image": "cuda11"})
    assert [i.name for i in s.trainer_images()] == ["cuda11", "cuda12"]  # the default first
    assert s.resolve_image(None).name == "cuda11"
    assert s.resolve_image(NEW["image"]).name == "cuda12"
    assert s.reference("cuda12") == NEW["image"]
    # a reference recorded at submission stays, even after the list changed
    assert s.reference("reg.example.com/gone:1") == "reg.example.com/gone:1"
    assert s.reference(None) == OLD["image"]
    with pytest.raises(SpecError, match="'elsewhere:1' is not a configured trainer image"):
        s.resolve_image("elsewhere:1")
    # without a list: the default image alone, never any reference
    one = ClusterSettings.from_dict({"image": "t:2"})
    assert one.trainer_images() == [TrainerImage("default", "t:2")]
    assert one.reference(None) == "t:2" and one.resolve_image("t:2").image == "t:2"
    with pytest.raises(SpecError, match=r"'reg\.example\.com/mine:1' is not a configured trainer"):
        one.resolve_image("reg.example.com/mine:1")
    # nothing configured: no image at all, and the message says who sets it
    bare = ClusterSettings.from_dict({})
    assert bare.trainer_images() == []
    with pytest.raises(SpecError, match="no trainer image is configured; an admin sets api"):
        bare.resolve_image(None)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"images": [NEW, {**OLD, "name": "cuda12"}]}, "images: 'cuda12' named more than once"),
        ({"images": [NEW], "image": "cuda9"}, "image: 'cuda9' is none of `images` (cuda12)"),
        ({"images": [{**NEW, "name": "CUDA 12"}]}, "'CUDA 12' is not a name for an image"),
        ({"images": [{**NEW, "image": "bad image"}]}, "'bad image' is not an image reference"),
        ({"images": [{**NEW, "lockhash": "x"}]}, "lockhash"),
        ({"runAsUser": 0}, "runAsUser"),
    ],
)
def test_bad_image_settings_are_refused_by_name(section: dict, message: str) -> None:
    with pytest.raises(BackendError) as err:
        ClusterSettings.from_dict(section)
    assert message in str(err.value)


def test_a_local_job_records_this_python(local_backend: LocalBackend, run_root: Path) -> None:
    job = aviflow.submit(
        {"metadata": {"name": "img"}, "spec": {"script": "print('hi')"}}, backend=local_backend
    )
    assert job.wait(timeout=120) is JobState.SUCCEEDED
    image = job.meta.image
    assert image == this_python() and image.name == "local" and image.image == ""
    assert image.packages["aviflow"] == metadata.version("aviflow")
    assert image.packages["torch"] == metadata.version("torch")
    assert local_backend.images() == [image]


def test_the_local_backend_refuses_another_image_and_writes_nothing(
    local_backend: LocalBackend, run_root: Path
) -> None:
    spec = {"metadata": {"name": "img"}, "spec": {"script": "1", "image": "reg/trainer:1"}}
    before = sorted(str(p.relative_to(run_root)) for p in run_root.rglob("*"))
    with pytest.raises(SpecError) as err:
        aviflow.submit(spec, backend=local_backend)
    assert err.value.problems[0].startswith(
        "spec.image: 'reg/trainer:1' is not a configured trainer image; choose one of: local"
    )
    assert local_backend.list_ids() == []
    # refused before anything was written: no user directory, no staging area, no index
    assert sorted(str(p.relative_to(run_root)) for p in run_root.rglob("*")) == before


def test_a_job_directory_is_given_to_the_pods_user(tmp_path: Path) -> None:
    from aviflow.spec import TrainJob
    from aviflow.store import RunStore

    if os.geteuid() != 0:
        pytest.fail("this test needs root (chown), as make test runs")
    store = RunStore(tmp_path / "runs")
    job = TrainJob.from_dict({"metadata": {"name": "own"}, "spec": {"script": "1"}})
    run = store.create(job, {"code/train.py": b"1"}, "alice", owner_ids=(1000, 1001))

    def owners(paths: list[Path]) -> set[tuple[int, int]]:
        return {(p.stat().st_uid, p.stat().st_gid) for p in paths}

    # the part the pods write is theirs; the control part and the code stay the platform's
    data = [run.data_dir, *run.data_dir.rglob("*")]
    assert owners(data) == {(1000, 1001)} and len(data) == 6
    rest = [p for p in [run.path, *run.path.rglob("*")] if p not in data]
    assert owners(rest) == {(0, 0)}
    assert {p.name for p in rest} >= {"job.yaml", "meta.json", "code", "train.py"}
    assert (run.path.parent.stat().st_uid, run.path.parent.stat().st_gid) == (0, 0)
    # the pods' ids are this process's: nothing to change
    mine = store.create(job, {}, "alice", owner_ids=(os.geteuid(), os.getegid()))
    assert mine.path.stat().st_uid == os.geteuid()
