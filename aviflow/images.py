"""Trainer images: which one a job runs in, and whether the notebook matches it.

A backend lists the trainer images it offers (``Backend.images()``: the admin's configured
list on a cluster, this machine's Python for the local backend). :func:`pick` resolves what
``--image`` names (a configured name or reference; none: the first, the default) and
:func:`mismatches` compares the notebook's torch, accelerate and aviflow with the image's
lock, so the magic can warn before a cell runs elsewhere with other versions.

>>> from aviflow.records import TrainerImage
>>> images = [TrainerImage("cuda12", "reg/trainer:1.0-abc", "abc", {"torch": "2.5.1"}),
...           TrainerImage("old", "reg/trainer:0.9-def", "def", {"torch": "2.4.0"})]
>>> pick(images, None).name, pick(images, "old").name, pick(images, "reg/trainer:0.9-def").name
('cuda12', 'old', 'old')
>>> [str(m) for m in mismatches(images[0], {"torch": "2.5.1+cpu", "accelerate": "1.0"})]
[]
>>> [str(m) for m in mismatches(images[1], {"torch": "2.5.1"})]
['torch 2.5.1 here, 2.4.0 in the image']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata

from aviflow.errors import SpecError
from aviflow.records import TrainerImage

# What a cell's behaviour depends on, in the notebook and on the nodes alike.
TRACKED = ("torch", "accelerate", "aviflow")
LOCAL = "local"  # the local backend's one image: the submitting machine's Python


@dataclass(frozen=True)
class VersionMismatch:
    """One package whose version differs between the notebook and the trainer image."""

    package: str
    notebook: str | None  # None: not installed in the notebook
    image: str

    def __str__(self) -> str:
        here = self.notebook if self.notebook is not None else "not installed"
        return f"{self.package} {here} here, {self.image} in the image"


def find(images: Sequence[TrainerImage], wanted: str | None) -> TrainerImage | None:
    """The image ``wanted`` names (an entry's name or reference; None: the first), if any."""
    if wanted is None:
        return images[0] if images else None
    return next((i for i in images if wanted in (i.name, i.image)), None)


def pick(images: Sequence[TrainerImage], wanted: str | None) -> TrainerImage:
    """The image ``wanted`` names (an entry's name or reference), or the first (the default).

    Raises :class:`~aviflow.errors.SpecError` naming the choices when ``wanted`` is none of
    them, or when no image is offered at all.
    """
    if not images:
        raise SpecError("spec.image: this backend offers no trainer image")
    found = find(images, wanted)
    if found is not None:
        return found
    choices = ", ".join(i.describe() for i in images)
    raise SpecError(
        f"spec.image: {wanted!r} is not a configured trainer image; choose one of: {choices}"
    )


def installed(names: Iterable[str] = TRACKED) -> dict[str, str | None]:
    """The installed version of each distribution here (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def this_python(name: str = LOCAL) -> TrainerImage:
    """This interpreter as a trainer image: no reference, its tracked packages' versions."""
    return TrainerImage(name, packages={k: v for k, v in installed().items() if v is not None})


def mismatches(image: TrainerImage, here: Mapping[str, str | None]) -> list[VersionMismatch]:
    """The tracked packages whose versions here differ from the image's (pure).

    Only the public version counts: torch ``2.5.1+cpu`` in a CPU notebook matches ``2.5.1``
    in a CUDA image, since a local label names a build of the same release. A package the
    image does not pin is not compared.
    """
    out = []
    for name in TRACKED:
        pinned = image.packages.get(name)
        if pinned is None:
            continue
        have = here.get(name)
        if have is None or _public(have) != _public(pinned):
            out.append(VersionMismatch(name, have, pinned))
    return out


def warning(image: TrainerImage, found: Sequence[VersionMismatch]) -> str:
    """The message the magic prints before submitting, or '' when nothing differs."""
    if not found:
        return ""
    lines = "\n".join(f"  {m}" for m in found)
    return (
        f"warning: this notebook's packages differ from trainer image {image.describe()}:\n"
        f"{lines}\n"
        "the job runs with the image's versions; install those here (pip install "
        + " ".join(f"{m.package}=={m.image}" for m in found)
        + ") or pick another image with --image"
    )


def _public(version: str) -> str:
    """The version without its local label (``2.5.1+cu124`` -> ``2.5.1``)."""
    return version.split("+", 1)[0].strip()
