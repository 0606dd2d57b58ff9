"""Map arbitrary names to DNS-1123 labels, injectively.

A name that already is a short, lowercase DNS-1123 label without ``---`` is kept as it is.
Any other name becomes ``<sanitized prefix>---<8 hex of sha256(name)>``: the ``---``
separator cannot appear in a kept name, so a kept name never equals a hashed one, and two
hashed names differ unless their SHA-256 prefixes collide.

>>> slugify("resnet-50")
'resnet-50'
>>> slugify("My Run")
'my-run---2635e181'
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
LABEL_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SEPARATOR = "---"
_HASH_LEN = 8


def is_dns1123_label(value: str, max_len: int = 63) -> bool:
    return len(value) <= max_len and DNS1123_LABEL.fullmatch(value) is not None


def _hash(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]


def slugify(name: str, max_len: int = 63) -> str:
    """Return a DNS-1123 label (at most ``max_len`` characters) that only ``name`` maps to."""
    if max_len < 16:
        raise ValueError("max_len must leave room for a prefix and the hash")
    if is_dns1123_label(name, max_len) and _SEPARATOR not in name:
        return name
    prefix = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    prefix = re.sub(r"-{2,}", "-", prefix)
    room = max_len - len(_SEPARATOR) - _HASH_LEN
    prefix = prefix[:room].rstrip("-") or "x"
    return f"{prefix}{_SEPARATOR}{_hash(name)}"


def label_value(value: str) -> str:
    """A valid Kubernetes label value that only ``value`` maps to."""
    if len(value) <= 63 and LABEL_VALUE.fullmatch(value) and _SEPARATOR not in value:
        return value
    return slugify(value)


def claim_name(v: str) -> str:
    """``v`` if it is a PersistentVolumeClaim name (a DNS-1123 label), else a ValueError (a
    pydantic validator of the settings that name claims)."""
    if not is_dns1123_label(v):
        raise ValueError(f"{v!r} is not a PersistentVolumeClaim name")
    return v


def mount_path(v: str, reserved: tuple[str, ...] = ()) -> str:
    """``v`` without its trailing ``/`` if it is a container mount path: absolute, no ``..``
    part, neither ``/`` nor one of ``reserved``; else a ValueError saying so (a pydantic
    validator of every setting that names where a volume is mounted).

    >>> mount_path("/cache/hf/")
    '/cache/hf'
    >>> mount_path("/dev/shm", reserved=("/dev/shm",))
    Traceback (most recent call last):
    ...
    ValueError: '/dev/shm' is not a mount path (an absolute path without '..', not / or /dev/shm)
    """
    path = v.rstrip("/")
    if not v.startswith("/") or ".." in PurePosixPath(v).parts or path in ("", *reserved):
        nots = " or ".join(("/", *reserved))
        raise ValueError(f"{v!r} is not a mount path (an absolute path without '..', not {nots})")
    return path
