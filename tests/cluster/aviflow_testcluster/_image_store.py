"""The images' part of the build cache (``<cache>/images``), written by ``images/build.sh``:

* entries (``_cache``): ``base/<key>`` (the mmdebstrap root filesystem, keyed by its package
  list and scripts), ``wheelhouse/<lock hash>`` (every wheel of the lock), ``proxy/<version>``
  (configurable-http-proxy from npm), ``layers/<diff id>`` (unpacked layers, ``_oci``);
* two stores shared by every clone: buildah's ``storage`` (its layer cache; ``run`` is its run
  root) and one OCI ``layout`` whose refs name image builds by content,
  ``<name>-<tag>-<image id>``, each with a stamp ``refs/<ref>`` (its last use, the buildah
  image) that :func:`prune` evicts by, oldest first, when the cache is over its bound.

A clone's own ``images/.build/oci`` is a layout whose ``index.json`` names the images that
clone built (``<name>-<tag>``) and whose ``blobs`` are the shared layout's.

``images/build.sh`` holds :attr:`ImageStore.lock` while it builds and prunes, so one build at
a time changes the stores (builds of two clones take turns).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import _cache

# (entries also put the three fixed kinds under images/: see the module docstring)
GROUP = "images"
# an image build's stamp counts its unique blobs this many times: compressed in the layout,
# and about twice that uncompressed in buildah's store
STORE_FACTOR = 3


@dataclass(frozen=True)
class ImageStore:
    cache: _cache.Cache

    @property
    def root(self) -> Path:
        return self.cache.root / GROUP

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def runroot(self) -> Path:
        return self.root / "run"

    @property
    def layout(self) -> Path:
        return self.root / "oci"

    @property
    def refs(self) -> Path:
        return self.root / "refs"

    @property
    def lock(self) -> Path:
        return self.root / ".lock"

    def entry(self, kind: str, key: str) -> _cache.Entry:
        return self.cache.entry(f"{GROUP}/{kind}", key)

    def shell(self, base_key: str, lock_hash: str, proxy_version: str) -> str:
        """Lines of ``NAME=value`` for ``eval`` in ``images/build.sh``: the stores, and for
        the base, the wheelhouse and the proxy the entry's directory and whether it is made
        (``*_READY=1``; an entry that is made counts as used now)."""
        values: dict[str, str] = {
            "IMAGES_CACHE": str(self.root),
            "STORAGE": str(self.storage),
            "RUNROOT": str(self.runroot),
            "LAYOUT": str(self.layout),
            "REFS": str(self.refs),
            "IMAGES_LOCK": str(self.lock),
        }
        for name, kind, key in (
            ("BASE", "base", base_key),
            ("WHEELS", "wheelhouse", lock_hash),
            ("PROXY", "proxy", proxy_version),
        ):
            entry = self.entry(kind, key)
            values[f"{name}_DIR"] = str(entry.path)
            values[f"{name}_READY"] = "1" if entry.ready() else ""
            if entry.ready():
                entry.touch()
        return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items())

    def builds(self) -> list[_cache.Candidate]:
        """Every image build the layout holds a stamp of, as an eviction candidate."""
        try:
            index = json.loads((self.layout / "index.json").read_text())
        except (OSError, ValueError):
            index = {"manifests": []}
        by_ref = {
            m.get("annotations", {}).get("org.opencontainers.image.ref.name"): m["digest"]
            for m in index.get("manifests", ())
        }
        blobs = {ref: self._blobs(digest) for ref, digest in by_ref.items()}
        out = []
        for stamp in sorted(self.refs.glob("*")) if self.refs.is_dir() else []:
            ref = stamp.name
            mine = blobs.get(ref, {})
            others = {d for r, b in blobs.items() if r != ref for d in b}
            unique = sum(size for d, size in mine.items() if d not in others)
            out.append(
                _cache.Candidate(
                    stamp, stamp.stat().st_mtime, unique * STORE_FACTOR, self._remover(stamp)
                )
            )
        return out

    def _blobs(self, digest: str) -> dict[str, int]:
        """The manifest's blobs (itself, config, layers) with their sizes."""
        path = self.layout / "blobs" / digest.replace(":", "/")
        try:
            manifest = json.loads(path.read_text())
        except (OSError, ValueError):
            return {}
        found = {digest: path.stat().st_size, manifest["config"]["digest"]: 0}
        for layer in manifest.get("layers", ()):
            found[layer["digest"]] = int(layer.get("size", 0))
        return found

    def _remover(self, stamp: Path) -> Callable[[], None]:
        def remove() -> None:
            try:
                image_id = json.loads(stamp.read_text()).get("id", "")
            except (OSError, ValueError):
                image_id = ""
            subprocess.run(
                ["umoci", "rm", "--image", f"{self.layout}:{stamp.name}"],
                capture_output=True,
                check=False,
            )
            if image_id:
                self.buildah("rmi", "--force", image_id)
            stamp.unlink(missing_ok=True)

        return remove

    def buildah(self, *args: str) -> subprocess.CompletedProcess[str]:
        store = ["--root", str(self.storage), "--runroot", str(self.runroot)]
        return subprocess.run(
            ["buildah", *store, *args], capture_output=True, text=True, check=False
        )


def measure(store: ImageStore) -> int:
    """Measure the stores (buildah's, the layout) and record it for the cache's size."""
    size = _cache.du(store.storage) + _cache.du(store.layout)
    store.cache.record_stores_size(size)
    return size


def prune(
    store: ImageStore, log: Callable[[str], None] | None = None, *, changed: bool = True
) -> list[Path]:
    """Keep the cache within its bound, image builds and entries alike, least recently used
    first (``images/build.sh`` calls it while it holds the store's lock; ``changed``: a build
    wrote to the stores, so they are measured again). After image builds were removed, the
    blobs and buildah layers no build refers to any more go too."""
    if changed or not store.cache.stores_size():
        measure(store)
    removed = _cache.evict(store.cache, extra=store.builds(), log=log)
    if any(p.parent == store.refs for p in removed):
        subprocess.run(["umoci", "gc", "--layout", str(store.layout)], check=False)
        # untagged images without children, then their parents: what no tagged image builds
        # on (the layer cache of the images tagged now stays)
        for _ in range(32):
            done = store.buildah("rmi", "--prune")
            if done.returncode != 0 or not done.stdout.strip():
                break
        measure(store)
    return removed
