"""Run a process inside an OCI image, as a container runtime would, without one.

An image in a local OCI layout (``images/build.sh`` writes ``images/.build/oci``) is
unpacked once per manifest digest with ``umoci`` into a cache (:func:`unpack`). Each run gets
its own writable overlay on that read-only root filesystem, its own mount and PID namespaces,
``/proc``, ``/dev`` and a private ``/tmp``, the bind mounts it asks for, and then runs as the
image's user with the image's environment and working directory (:func:`run_argv`, a pure
builder of the ``unshare`` command line). Killing the returned process kills everything in it
(``unshare --kill-child``), and the namespace takes its mounts with it.

>>> b = unpack(Path("images/.build/oci"), "hub-0.1.0-abc", Path("/var/cache/x"))  # doctest: +SKIP
>>> subprocess.run(run_argv(b, rw, ["jupyterhub", "--version"]))            # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._lock import locked

UNPACK_TIMEOUT = 900
IMAGE_CONFIG = "image-config.json"  # the OCI image config, kept beside umoci's bundle


class ImageError(RuntimeError):
    """An image that is not in the layout, or that umoci could not unpack."""


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
    """An unpacked image: ``rootfs/`` and umoci's runtime ``config.json``."""

    path: Path
    digest: str

    @property
    def rootfs(self) -> Path:
        return self.path / "rootfs"

    def process(self) -> ImageProcess:
        spec = json.loads((self.path / "config.json").read_text())["process"]
        env = tuple(tuple(kv.split("=", 1)) for kv in spec.get("env", ()) if "=" in kv)
        user = spec.get("user", {})
        image_config = self.path / IMAGE_CONFIG
        config = (
            json.loads(image_config.read_text()).get("config", {}) if image_config.exists() else {}
        )
        return ImageProcess(
            args=tuple(spec.get("args", ())),
            env=env,  # type: ignore[arg-type]
            cwd=spec.get("cwd") or "/",
            uid=int(user.get("uid", 0)),
            gid=int(user.get("gid", 0)),
            entrypoint=tuple(config.get("Entrypoint") or ()),
            cmd=tuple(config.get("Cmd") or ()),
        )


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


def unpack(layout: Path, ref: str, cache: Path) -> Bundle:
    """The image ``ref`` of ``layout`` unpacked under ``cache/<digest>`` (once per digest;
    concurrent callers wait for the first). Raises :class:`ImageError` when it is not there."""
    digest = manifest_digest(layout, ref)
    if digest is None:
        raise ImageError(f"no image {ref!r} in the OCI layout {layout}")
    target = cache.resolve() / digest.replace(":", "-")
    with locked(target.parent / f".{target.name}.lock"):
        if (target / "config.json").is_file():
            if not (target / IMAGE_CONFIG).is_file():  # unpacked before configs were kept
                _keep_config(layout, digest, target)
            return Bundle(target, digest)
        tmp = target.parent / f".{target.name}.tmp{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        proc = subprocess.run(
            ["umoci", "unpack", "--image", f"{layout}:{ref}", str(tmp)],
            capture_output=True,
            text=True,
            timeout=UNPACK_TIMEOUT,
        )
        if proc.returncode != 0:
            shutil.rmtree(tmp, ignore_errors=True)
            raise ImageError(f"umoci could not unpack {layout}:{ref}: {proc.stderr.strip()[-500:]}")
        _keep_config(layout, digest, tmp)
        tmp.rename(target)
    return Bundle(target, digest)


def _keep_config(layout: Path, digest: str, bundle: Path) -> None:
    blob = lambda d: layout / "blobs" / d.replace(":", "/")  # noqa: E731
    manifest = json.loads(blob(digest).read_text())
    shutil.copy(blob(manifest["config"]["digest"]), bundle / IMAGE_CONFIG)


# Inside the new mount namespace: an overlay with a writable layer of this run's own, /proc,
# /dev, a private /tmp and /dev/shm, the binds, the working directory (created, as runc does),
# then the image's user, environment and working directory.
_SCRIPT = """set -eu
m="$RW/merged"
mkdir -p "$RW/upper" "$RW/work" "$m"
mount -t overlay overlay -o "lowerdir=$ROOTFS,upperdir=$RW/upper,workdir=$RW/work" "$m"
mount -t proc proc "$m/proc"
mount --rbind /dev "$m/dev"
mount -t tmpfs -o mode=1777 tmpfs "$m/tmp"
mount -t tmpfs -o mode=1777 tmpfs "$m/dev/shm"
%(binds)s
mkdir -p "$m$CWD"
chown "$USERSPEC" "$m$CWD"
exec chroot --userspec="$USERSPEC" "$m" /usr/bin/env -i -C "$CWD" "$@"
"""


def in_root(rootfs: Path, path: str) -> str:
    """``path`` inside the image with its symlinks resolved within ``rootfs``, as runc does
    for mount points: Debian's ``/var/run`` is a link to ``/run``, and following it from
    outside the root would mount (and create directories) on this machine's ``/run``.

    >>> import tempfile; root = Path(tempfile.mkdtemp()); (root / "run").mkdir()
    >>> (root / "var").mkdir(); (root / "var" / "run").symlink_to("/run")
    >>> in_root(root, "/var/run/secrets/token"), in_root(root, "/etc/../etc/hosts")
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
        here = rootfs.joinpath(*done, part)
        if here.is_symlink():
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
        dst = in_root(bundle.rootfs, dst)
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
        "ROOTFS": str(bundle.rootfs),
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
