"""Running a process inside an OCI image (``_oci``): what the image's config says, the exact
``unshare`` command line built from it, and its layers unpacked once each into the build cache
with overlayfs' whiteouts, then run for real."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from aviflow_testcluster import _cache, _oci
from oci_layouts import layer, write_layout


def bundle(tmp_path: Path, user: str = "1000:1000") -> _oci.Bundle:
    config = {
        "config": {
            "Entrypoint": ["/usr/bin/tini", "--"],
            "Cmd": ["jupyterhub"],
            "Env": ["PATH=/opt/aviflow/bin:/usr/bin:/bin", "LANG=C.UTF-8", "BROKEN"],
            "WorkingDir": "/srv/jupyterhub",
            "User": user,
        }
    }
    layers = (tmp_path / "base", tmp_path / "top")
    for d in layers:
        d.mkdir(exist_ok=True)
    return _oci.Bundle(layers, "sha256:abc", config)


def test_the_image_process_comes_from_its_config(tmp_path: Path) -> None:
    assert bundle(tmp_path).process() == _oci.ImageProcess(
        args=("/usr/bin/tini", "--", "jupyterhub"),
        env=(("PATH", "/opt/aviflow/bin:/usr/bin:/bin"), ("LANG", "C.UTF-8")),
        cwd="/srv/jupyterhub",
        uid=1000,
        gid=1000,
        entrypoint=("/usr/bin/tini", "--"),
        cmd=("jupyterhub",),
    )


def test_a_user_by_name_is_the_images_own_passwd_entry(tmp_path: Path) -> None:
    b = bundle(tmp_path, user="jovyan")
    (tmp_path / "base" / "etc").mkdir()
    (tmp_path / "base" / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (tmp_path / "top" / "etc").mkdir()
    (tmp_path / "top" / "etc" / "passwd").write_text(
        "root:x:0:0::/root:/bin/sh\njovyan:x:1000:100::/home/jovyan:/bin/bash\n"
    )
    (tmp_path / "top" / "etc" / "group").write_text("users:x:100:\nstaff:x:50:\n")
    assert (b.process().uid, b.process().gid) == (1000, 100)  # the top layer's passwd
    assert b.user("jovyan:staff") == (1000, 50)
    assert b.user("2000") == (2000, 0)  # a number no entry has: group 0, as runc
    with pytest.raises(_oci.ImageError, match="'nobody' is not in its /etc/passwd"):
        b.user("nobody")


def test_run_argv_is_unshare_with_the_image_user_env_and_binds(tmp_path: Path) -> None:
    b = bundle(tmp_path)
    argv = _oci.run_argv(
        b,
        Path("/rw"),
        ["python", "-c", "1"],
        env={"LANG": "en_US.UTF-8", "X": "it's"},
        binds=[
            (Path("/data/run 1"), "/runs/run 1", False),
            (Path("/etc/hosts"), "/etc/hosts", True),
        ],
    )
    script = argv[argv.index("-c") + 1]
    assert argv[: argv.index("unshare")] == [
        "env",
        f"LOWER={tmp_path / 'top'}:{tmp_path / 'base'}",
        "RW=/rw",
        "CWD=/srv/jupyterhub",
        "USERSPEC=1000:1000",
        "BIND0=/data/run 1",
        "BIND1=/etc/hosts",
    ]
    assert argv[argv.index("unshare") : argv.index("-c")] == [
        "unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", "sh",
    ]  # fmt: skip
    assert argv[argv.index("-c") + 2 :] == [
        "sh",
        "LANG=en_US.UTF-8",
        "PATH=/opt/aviflow/bin:/usr/bin:/bin",
        "X=it's",
        "python",
        "-c",
        "1",
    ]
    assert """mount --bind "$BIND0" "$m"'/runs/run 1'\n""" in script
    assert (
        """mount --bind "$BIND1" "$m"/etc/hosts\nmount -o remount,bind,ro "$m"/etc/hosts"""
        in script
    )
    assert script.rstrip().endswith(
        'exec chroot --userspec="$USERSPEC" "$m" /usr/bin/env -i -C "$CWD" "$@"'
    )
    # without argv: the image's own entrypoint and command; a user and cwd of the caller's
    own = _oci.run_argv(b, Path("/rw"), cwd="/tmp", user=(0, 0))
    assert own[-3:] == ["/usr/bin/tini", "--", "jupyterhub"]
    assert "CWD=/tmp" in own and "USERSPEC=0:0" in own


def test_an_image_that_is_not_in_the_layout_is_an_image_error(tmp_path: Path) -> None:
    (tmp_path / "index.json").write_text(json.dumps({"manifests": []}))
    with pytest.raises(_oci.ImageError) as e:
        _oci.unpack(tmp_path, "1.0", _cache.Cache(tmp_path / "cache"))
    assert str(e.value) == f"no image '1.0' in the OCI layout {tmp_path}"
    assert not (tmp_path / "cache").exists()
    assert _oci.manifest_digest(tmp_path / "missing", "1.0") is None


def test_mount_points_resolve_symlinks_inside_the_image(tmp_path: Path) -> None:
    """Debian's /var/run -> /run: a pod's service-account token goes to the image's /run, not
    to this machine's (runc resolves mount points within the root the same way)."""
    from aviflow_testcluster._oci import ImageError, in_root

    (tmp_path / "run").mkdir()
    (tmp_path / "var").mkdir()
    (tmp_path / "var" / "run").symlink_to("/run")
    (tmp_path / "var" / "lock").symlink_to("../run/lock")
    (tmp_path / "loop").symlink_to("loop")
    assert in_root([tmp_path], "/var/run/secrets/kubernetes.io/serviceaccount") == (
        "/run/secrets/kubernetes.io/serviceaccount"
    )
    assert in_root([tmp_path], "/var/lock/x") == "/run/lock/x"
    assert in_root([tmp_path], "/../../etc/hosts") == "/etc/hosts"  # never above the root
    with pytest.raises(ImageError, match="too many symbolic links"):
        in_root([tmp_path], "/loop/x")
    # a layer above replaces the link with a directory: the path is the layer's own
    top = tmp_path.parent / f"{tmp_path.name}-top"
    (top / "var" / "run").mkdir(parents=True)
    assert in_root([tmp_path, top], "/var/run/x") == "/var/run/x"


# -- layers ------------------------------------------------------------------------------------


# A root with the host's /usr bound in (bin, lib and lib64 are links into it, as on Debian),
# then: a removed file, an opaque directory, a file replaced by a directory above it.
BASE = layer(
    {"data/": None, "data/a": "a", "data/b": "b", "keep/": None, "keep/x": "x", "keep/sub/z": "z",
     "usr/": None, "proc/": None, "dev/": None, "tmp/": None, "etc/": None,
     "etc/passwd": "root:x:0:0::/root:/bin/sh\n"},
    {"bin": "usr/bin", "lib": "usr/lib", "lib64": "usr/lib64", "var/run": "/run"},
)  # fmt: skip
TOP = layer({"data/.wh.a": "", "keep/": None, "keep/.wh..wh..opq": "", "keep/y": "y"})
OTHER = layer({"data/c": "c"})


def test_layers_unpack_once_each_with_overlay_whiteouts(tmp_path: Path) -> None:
    write_layout(tmp_path / "oci", {"one-1.0": [BASE, TOP], "two-1.0": [BASE, OTHER]})
    cache = _cache.Cache(tmp_path / "cache")
    one = _oci.unpack(tmp_path / "oci", "one-1.0", cache)
    two = _oci.unpack(tmp_path / "oci", "two-1.0", cache)
    assert one.layers[0] == two.layers[0]  # the shared layer is unpacked once
    assert [e.kind for e in cache.entries()] == ["images/layers"] * 3
    removed = os.lstat(one.layers[1] / "data" / "a")
    assert stat.S_ISCHR(removed.st_mode) and removed.st_rdev == 0
    assert os.getxattr(one.layers[1] / "keep", "trusted.overlay.opaque") == b"y"
    assert not [p.name for p in one.layers[1].rglob(".wh.*")]
    assert one.lookup("/data/a") is None and one.lookup("/keep/x") is None
    assert one.lookup("/keep/y") == one.layers[1] / "keep" / "y"
    assert one.lookup("/data/b") == one.layers[0] / "data" / "b"
    assert two.lookup("/data/a") == two.layers[0] / "data" / "a"
    assert one.process().args == ("/bin/sh",) and (one.process().uid, one.process().gid) == (0, 0)
    # unpacked again: the same directories, nothing made again
    made = [e.path.stat().st_ino for e in cache.entries()]
    assert _oci.unpack(tmp_path / "oci", "one-1.0", cache) == one
    assert [e.path.stat().st_ino for e in cache.entries()] == made


def test_a_run_sees_the_layers_as_one_root(tmp_path: Path) -> None:
    write_layout(tmp_path / "oci", {"one-1.0": [BASE, TOP]})
    one = _oci.unpack(tmp_path / "oci", "one-1.0", _cache.Cache(tmp_path / "cache"))
    argv = _oci.run_argv(
        one,
        tmp_path / "rw",
        ["/bin/sh", "-c", "ls /data /keep; echo new > /data/b; cat /data/b"],
        binds=[(Path("/usr"), "/usr", True)],
        cwd="/",
        user=(0, 0),
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        0,
        "/data:\nb\n\n/keep:\ny\nnew\n",
        "",
    ), proc.stderr
    assert (one.layers[0] / "data" / "b").read_text() == "b"  # writes go to the run's own layer
