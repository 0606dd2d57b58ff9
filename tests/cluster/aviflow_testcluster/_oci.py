"""Run a process inside an OCI image, as a container runtime would, without one.

An image in a local OCI layout (``images/build.sh`` writes ``images/.build/oci``) is
unpacked as containerd's overlay snapshotter does it: each layer once, by its content
(``diff_id``), into an entry of the build cache shared by every clone (:func:`unpack`,
``<cache>/images/layers/<diff id>``), its whiteouts turned into overlayfs' own (a ``0/0``
character device for a removed path, the ``trusted.overlay.opaque`` attribute for an opaque
directory). Images that share layers share their unpacked files: the notebook image unpacks
only what it adds to the trainer's, and a change to aviflow only its own small layers.

Each run gets its own writable overlay on those read-only layers, its own mount and PID
namespaces, ``/proc``, ``/dev`` and a private ``/tmp``, the bind mounts it asks for, and then
runs as the image's user with the image's environment and working directory
(:func:`run_argv`, a pure builder of the ``unshare`` command line). Killing the returned process
kills everything in it (``unshare --kill-child``), and the namespace takes its mounts with it.

>>> b = unpack(Path("images/.build/oci"), "hub-0.1.0-abc")                  # doctest: +SKIP
>>> subprocess.run(run_argv(b, rw, ["jupyterhub", "--version"]))            # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from . import _cache

UNPACK_TIMEOUT = 900
LAYERS_KIND = "images/layers"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OPAQUE_XATTR = "trusted.overlay.opaque"


class ImageError(RuntimeError):
    """An image that is not in the layout, or that could not be unpacked."""


@dataclass(frozen=True)
class ImageProcess:
    """What the image says to run: its ``Entrypoint + Cmd``, ``Env``, ``WorkingDir``, ``User``."""

    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str
    uid: int
    gid: int
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()

    def argv(self, command: list[str], args: list[str]) -> list[str]:
        """What a container runs, by Kubernetes' rule: ``command`` replaces the image's
        Entrypoint (and drops its Cmd), ``args`` replaces its Cmd."""
        if command:
            return [*command, *args]
        return [*self.entrypoint, *(args or self.cmd)]


@dataclass(frozen=True)
class Bundle:
    """An unpacked image: its layers' directories (bottom first) and its OCI image config."""

    layers: tuple[Path, ...]
    digest: str
    config: Mapping[str, object] = field(default_factory=dict)

    @property
    def lowerdir(self) -> str:
        """The layers as overlayfs' ``lowerdir`` option: the top layer first."""
        return ":".join(str(p) for p in reversed(self.layers))

    def lookup(self, path: str) -> Path | None:
        """Where ``path`` (inside the image; symlinks are not followed) is in the topmost
        layer that has it, as the overlay shows it: None when no layer has it, or a layer
        above removed it (a whiteout) or hid what is below (an opaque directory)."""
        return lookup(self.layers, path)

    def process(self) -> ImageProcess:
        c = self.config.get("config") or {}
        assert isinstance(c, dict)
        env = tuple(tuple(kv.split("=", 1)) for kv in c.get("Env") or () if "=" in kv)
        entrypoint = tuple(c.get("Entrypoint") or ())
        cmd = tuple(c.get("Cmd") or ())
        uid, gid = self.user(str(c.get("User") or ""))
        return ImageProcess(
            args=(*entrypoint, *cmd),
            env=env,  # type: ignore[arg-type]
            cwd=c.get("WorkingDir") or "/",
            uid=uid,
            gid=gid,
            entrypoint=entrypoint,
            cmd=cmd,
        )

    def user(self, spec: str) -> tuple[int, int]:
        """The image's ``User`` (``uid``, ``name``, ``uid:gid``, ``name:group``) as numbers,
        by the image's own ``/etc/passwd`` and ``/etc/group``, as runc does: a user without a
        group has the passwd entry's group, else 0."""
        user, _, group = spec.partition(":")
        passwd = self._table("/etc/passwd")
        uid, gid = 0, 0
        if user:
            row = next((r for r in passwd if user in (r[0], r[2])), None)
            if row is not None:
                uid, gid = int(row[2]), int(row[3])
            elif user.isdigit():
                uid = int(user)
            else:
                raise ImageError(f"the image's user {user!r} is not in its /etc/passwd")
        if group:
            row = next((r for r in self._table("/etc/group") if group in (r[0], r[2])), None)
            if row is not None:
                gid = int(row[2])
            elif group.isdigit():
                gid = int(group)
            else:
                raise ImageError(f"the image's group {group!r} is not in its /etc/group")
        return uid, gid

    def _table(self, path: str) -> list[list[str]]:
        found = self.lookup(path)
        if found is None or not found.is_file():
            return []
        rows = [line.split(":") for line in found.read_text(errors="replace").splitlines()]
        number = 4 if path == "/etc/passwd" else 3  # (a group's 4th field lists members)
        return [r for r in rows if len(r) >= 4 and all(f.isdigit() for f in r[2:number])]


def _whiteout(st: os.stat_result) -> bool:
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == 0


def _opaque(path: Path) -> bool:
    try:
        return os.getxattr(path, OPAQUE_XATTR, follow_symlinks=False) == b"y"
    except OSError:
        return False


def lookup(layers: Sequence[Path], path: str) -> Path | None:
    """:meth:`Bundle.lookup` on ``layers`` (bottom first).

    >>> import tempfile; lo, up = Path(tempfile.mkdtemp()), Path(tempfile.mkdtemp())
    >>> (lo / "etc").mkdir(); _ = (lo / "etc" / "a").write_text("1"), (lo / "etc" / "b").write_text("2")
    >>> (up / "etc").mkdir(); os.mknod(up / "etc" / "a", stat.S_IFCHR, os.makedev(0, 0))
    >>> lookup([lo, up], "/etc/a"), lookup([lo, up], "/etc/b") == lo / "etc" / "b"
    (None, True)
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    for layer in reversed(layers):
        here, hidden = layer, False
        for i, part in enumerate(parts):
            here = here / part
            try:
                st = os.lstat(here)
            except (FileNotFoundError, NotADirectoryError):
                break
            if _whiteout(st):
                return None
            if i < len(parts) - 1:
                if not stat.S_ISDIR(st.st_mode):
                    return None  # a file or link replaced the directory on the path here
                hidden = hidden or _opaque(here)
        else:
            return here
        if hidden:
            return None
    return None


def locate(layout: Path, image: str) -> tuple[Path, str]:
    """Where an image reference lives in the layout ``images/build.sh`` writes (one for all
    images): ``localhost/aviflow/trainer:0.1.0-abc`` -> (``layout``, ``trainer-0.1.0-abc``)."""
    name, _, tag = image.rpartition(":")
    if not name or "/" in tag:
        name, tag = image, "latest"
    return layout, f"{name.rsplit('/', 1)[-1]}-{tag}"


def manifest_digest(layout: Path, ref: str) -> str | None:
    """The manifest digest tagged ``ref`` in the OCI layout (None: no such tag or layout)."""
    try:
        index = json.loads((layout / "index.json").read_text())
    except (OSError, ValueError):
        return None
    for m in index.get("manifests", ()):
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref:
            return str(m["digest"])
    return None


def _blob(layout: Path, digest: str) -> Path:
    algorithm, _, hexdigest = digest.partition(":")
    if not algorithm.isalnum() or not hexdigest.isalnum():
        raise ImageError(f"bad digest {digest!r} in the OCI layout {layout}")
    return layout / "blobs" / algorithm / hexdigest


def _read_json(layout: Path, digest: str, what: str) -> dict:
    try:
        return json.loads(_blob(layout, digest).read_bytes())
    except (OSError, ValueError) as e:
        raise ImageError(f"cannot read the {what} {digest} of the OCI layout {layout}: {e}") from e


def unpack(layout: Path, ref: str, cache: _cache.Cache | None = None) -> Bundle:
    """The image ``ref`` of ``layout``, each of its layers unpacked once per content into
    ``cache`` (default: the machine's build cache; concurrent callers wait for the first).
    Raises :class:`ImageError` when it is not there or cannot be unpacked."""
    digest = manifest_digest(layout, ref)
    if digest is None:
        raise ImageError(f"no image {ref!r} in the OCI layout {layout}")
    cache = cache or _cache.default_cache()
    manifest = _read_json(layout, digest, "manifest")
    config = _read_json(layout, manifest["config"]["digest"], "image config")
    diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
    layers = manifest.get("layers") or []
    if len(diff_ids) != len(layers):
        raise ImageError(f"{ref}: {len(layers)} layers but {len(diff_ids)} diff_ids in its config")
    dirs = []
    for layer, diff_id in zip(layers, diff_ids, strict=True):
        blob = _blob(layout, layer["digest"])
        entry = cache.entry(LAYERS_KIND, diff_id.replace(":", "-")[:31])
        dirs.append(entry.ensure(lambda tmp, blob=blob: _unpack_layer(blob, tmp)))
    if ":" in "".join(map(str, dirs)):
        raise ImageError(f"the build cache's path {cache.root} has a ':', which overlayfs refuses")
    return Bundle(tuple(dirs), digest, config)


def _unpack_layer(blob: Path, out: Path) -> None:
    """Extract one layer (tar, gzip or zstd) into ``out`` with owners, modes and extended
    attributes, then turn OCI whiteouts into overlayfs ones."""
    tar = [
        "tar", "-x", "-f", str(blob), "-C", str(out), "--numeric-owner", "--same-owner",
        "--same-permissions", "--xattrs", "--xattrs-include=*", "--no-overwrite-dir",
    ]  # fmt: skip
    proc = subprocess.run(tar, capture_output=True, text=True, timeout=UNPACK_TIMEOUT)
    if proc.returncode != 0:
        raise ImageError(f"cannot unpack the layer {blob}: {proc.stderr.strip()[-500:]}")
    for directory, dirnames, filenames in os.walk(out):
        for name in [n for n in (*dirnames, *filenames) if n.startswith(WHITEOUT)]:
            marker = Path(directory) / name
            if marker.is_dir() and not marker.is_symlink():
                raise ImageError(f"the layer {blob} has a directory named like a whiteout: {name}")
            marker.unlink()
            if name == OPAQUE:
                os.setxattr(directory, OPAQUE_XATTR, b"y")
            elif not os.path.lexists(Path(directory) / name[len(WHITEOUT) :]):
                os.mknod(Path(directory) / name[len(WHITEOUT) :], stat.S_IFCHR, os.makedev(0, 0))
        dirnames[:] = [d for d in dirnames if not d.startswith(WHITEOUT)]


# Inside the new mount namespace: an overlay of the image's layers with a writable layer of
# this run's own, /proc,
# /dev, a private /tmp and /dev/shm, the binds, the working directory (created, as runc does),
# then the image's user, environment and working directory.
_SCRIPT = """set -eu
m="$RW/merged"
mkdir -p "$RW/upper" "$RW/work" "$m"
mount -t overlay overlay -o "lowerdir=$LOWER,upperdir=$RW/upper,workdir=$RW/work" "$m"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
%(binds)s
mkdir -p "$m$CWD"
chown "$USERSPEC" "$m$CWD"
exec chroot --userspec="$USERSPEC" "$m" /usr/bin/env -i -C "$CWD" "$@"
"""


def in_root(layers: Sequence[Path], path: str) -> str:
    """``path`` inside the image with its symlinks resolved within the image's ``layers``, as
    runc does for mount points: Debian's ``/var/run`` is a link to ``/run``, and following it
    from outside the root would mount (and create directories) on this machine's ``/run``.

    >>> import tempfile; root = Path(tempfile.mkdtemp()); (root / "run").mkdir()
    >>> (root / "var").mkdir(); (root / "var" / "run").symlink_to("/run")
    >>> in_root([root], "/var/run/secrets/token"), in_root([root], "/etc/../etc/hosts")
    ('/run/secrets/token', '/etc/hosts')
    """
    parts = [p for p in path.split("/") if p not in ("", ".")]
    done: list[str] = []
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == "..":
            if done:
                done.pop()
            continue
        here = lookup(layers, "/".join([*done, part]))
        if here is not None and here.is_symlink():
            hops += 1
            if hops > 40:
                raise ImageError(f"too many symbolic links in {path} inside the image")
            target = os.readlink(here)
            if target.startswith("/"):
                done = []
            parts = [p for p in target.split("/") if p not in ("", ".")] + parts
            continue
        done.append(part)
    return "/" + "/".join(done)


def run_argv(
    bundle: Bundle,
    rw: Path,
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    binds: Sequence[tuple[Path, str, bool]] = (),
    cwd: str | None = None,
    user: tuple[int, int] | None = None,
    hostname: str | None = None,
    pid_namespace: bool = True,
) -> list[str]:
    """The command line that runs ``argv`` (default: the image's own) inside ``bundle``.

    ``rw`` is this run's scratch directory (its writable layer; remove it afterwards);
    ``env`` is added to the image's; ``binds`` are ``(host path, path in the image, read
    only)``; ``cwd`` and ``user`` (uid, gid) override the image's; ``hostname`` gives the run
    a UTS namespace of its own; ``pid_namespace=False`` keeps the caller's PID namespace
    (so the command is not PID 1 there and keeps default signal handling).
    """
    image = bundle.process()
    merged_env = dict(image.env)
    merged_env.update(env or {})
    binds_script = []
    for i, (_src, dst, read_only) in enumerate(binds):
        dst = in_root(bundle.layers, dst)
        d = f'"$m"{shlex.quote(dst)}'
        binds_script.append(
            f'if [ -d "$BIND{i}" ]; then mkdir -p {d}; '
            f'else mkdir -p "$(dirname {d})"; [ -e {d} ] || : > {d}; fi; '
            f'mount --bind "$BIND{i}" {d}'
        )
        if read_only:
            binds_script.append(f'mount -o remount,bind,ro "$m"{shlex.quote(dst)}')
    uid, gid = user if user is not None else (image.uid, image.gid)
    variables = {
        "LOWER": bundle.lowerdir,
        "RW": str(rw),
        "CWD": cwd or image.cwd,
        "USERSPEC": f"{uid}:{gid}",
        **{f"BIND{i}": str(src) for i, (src, _, _) in enumerate(binds)},
    }
    if hostname is not None:
        variables["HOSTNAME_"] = hostname[:63]
        binds_script.append('hostname "$HOSTNAME_"')
    namespaces = ["--mount", *(["--uts"] if hostname is not None else [])]
    if pid_namespace:
        namespaces += ["--pid", "--fork", "--kill-child"]
    return [
        "env",
        *(f"{k}={v}" for k, v in variables.items()),
        "unshare",
        *namespaces,
        "--propagation",
        "private",
        "sh",
        "-c",
        _SCRIPT % {"binds": "\n".join(binds_script)},
        "sh",
        *(f"{k}={v}" for k, v in sorted(merged_env.items())),
        *(argv if argv is not None else image.args),
    ]
