"""The notebook-versus-trainer-image check the magic runs before submitting.

The job runs with the trainer image's torch, accelerate and aviflow, not the notebook's; a
difference is printed (naming each package and both versions) before the cell is sent,
so "it worked in the notebook" is not a surprise on the nodes. Nothing is refused here:
the backend decides whether the image may be used.
"""

from __future__ import annotations

from aviflow.backends import Backend
from aviflow.errors import AviflowError
from aviflow.images import find, installed, mismatches, warning
from aviflow.spec import TrainJob


def version_warning(backend: Backend, job: TrainJob) -> str:
    """The warning for ``job``'s image on ``backend``, or '' (same versions, or an image
    whose versions the backend does not know)."""
    try:
        images = backend.images()
    except AviflowError:
        return ""  # an older aviflow-api, a cluster that cannot be read: submit decides
    image = find(images, job.spec.image)
    if image is None or not image.packages:
        return ""
    return warning(image, mismatches(image, installed()))
