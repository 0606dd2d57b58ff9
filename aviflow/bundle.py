"""The code snapshot shipped with a job: files, an entry point and a content hash.

Building a bundle reads the files a spec names (``scriptFile``, ``accelerate.configFile``)
and checks them, before anything is written to the run store.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from aviflow.errors import SpecError
from aviflow.spec import TrainJob
from aviflow.store import CODE_DIR, MANIFEST

MAX_FILE_BYTES = 16 << 20
SCRIPT_NAME = "train.py"
ACCELERATE_CONFIG_NAME = "accelerate_config.yaml"


@dataclass(frozen=True)
class CodeBundle:
    """Files relative to the job's ``code/`` directory, plus how to run them."""

    files: dict[str, bytes]
    entrypoint: str | None = None
    accelerate_config: str | None = None
    origin: dict[str, Any] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        h = hashlib.sha256()
        for name in sorted(self.files):
            h.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        return "sha256:" + h.hexdigest()

    def manifest(self) -> dict[str, Any]:
        return {
            "entrypoint": self.entrypoint,
            "accelerate_config": self.accelerate_config,
            "content_hash": self.content_hash,
            "files": {
                n: "sha256:" + hashlib.sha256(b).hexdigest() for n, b in sorted(self.files.items())
            },
            "origin": self.origin,
        }

    def store_files(self) -> dict[str, bytes]:
        """What the run store writes: ``code/<file>`` plus ``code/MANIFEST.json``."""
        out = {f"{CODE_DIR}/{n}": b for n, b in self.files.items()}
        out[f"{CODE_DIR}/{MANIFEST}"] = json.dumps(self.manifest(), indent=2).encode()
        return out


def _read(key: str, path: str, base_dir: Path) -> bytes:
    p = Path(path).expanduser()
    p = p if p.is_absolute() else base_dir / p
    if not p.is_file():
        raise SpecError(f"spec.{key}: {p} does not exist or is not a regular file")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise SpecError(f"spec.{key}: {p} is {size} bytes; at most {MAX_FILE_BYTES} can be shipped")
    try:
        return p.read_bytes()
    except OSError as exc:
        raise SpecError(f"spec.{key}: cannot read {p}: {exc.strerror}") from None


def build_bundle(
    job: TrainJob,
    base_dir: str | Path | None = None,
    extra_files: dict[str, bytes] | None = None,
    origin: dict[str, Any] | None = None,
) -> CodeBundle:
    """Collect the job's code. Relative paths are taken from ``base_dir`` (default: cwd)."""
    base = Path(base_dir) if base_dir is not None else Path.cwd()
    spec = job.spec
    files: dict[str, bytes] = dict(extra_files or {})
    entrypoint = None
    if spec.script is not None:
        files[SCRIPT_NAME] = spec.script.encode()
        entrypoint = SCRIPT_NAME
    elif spec.script_file is not None:
        content = _read("scriptFile", spec.script_file, base)
        entrypoint = Path(spec.script_file).name
        if not entrypoint.endswith(".py"):
            raise SpecError(
                f"spec.scriptFile: {spec.script_file!r} is not a .py file; run other programs with `command`"
            )
        files[entrypoint] = content
    accelerate_config = None
    if spec.accelerate.config_file is not None:
        content = _read("accelerate.configFile", spec.accelerate.config_file, base)
        try:
            parsed = yaml.safe_load(content)
        except yaml.YAMLError as exc:
            raise SpecError(f"spec.accelerate.configFile: not valid YAML: {exc}") from None
        if not isinstance(parsed, dict):
            raise SpecError(
                "spec.accelerate.configFile: must be an `accelerate config` YAML mapping"
            )
        files[ACCELERATE_CONFIG_NAME] = content
        accelerate_config = ACCELERATE_CONFIG_NAME
    return CodeBundle(
        files=files,
        entrypoint=entrypoint,
        accelerate_config=accelerate_config,
        origin=dict(origin or {}),
    )
