"""Small OCI layouts written by hand for the tests of ``_oci`` and the image store:
``layer(files, links)`` is a gzipped layer, ``write_layout(path, {ref: [layer, ...]})`` a valid
layout (umoci reads it) with one image per ref."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def layer(files: dict[str, str | None], links: dict[str, str] | None = None) -> bytes:
    """A gzipped layer tar: ``files`` (name -> text; None: a directory), ``links`` (symlinks)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, text in files.items():
            info = tarfile.TarInfo(name)
            if text is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = text.encode()
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
    return out.getvalue()


def write_layout(path: Path, images: dict[str, list[bytes]]) -> None:
    """An OCI layout with one image per ref, each of the given layers."""
    blobs = path / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)

    def put(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (blobs / digest).write_bytes(data)
        return f"sha256:{digest}"

    manifests = []
    for ref, layers in images.items():
        diff_ids = [f"sha256:{hashlib.sha256(gzip.decompress(b)).hexdigest()}" for b in layers]
        config = {
            "config": {"Cmd": ["/bin/sh"]},
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }
        config_blob = json.dumps(config).encode()
        manifest = {
            "schemaVersion": 2,
            "config": {"digest": put(config_blob), "size": len(config_blob)},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": put(b),
                 "size": len(b)} for b in layers
            ],
        }  # fmt: skip
        data = json.dumps(manifest).encode()
        manifests.append(
            {
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": put(data),
                "size": len(data),
                "annotations": {"org.opencontainers.image.ref.name": ref},
            }
        )
    (path / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": manifests}))
    (path / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
