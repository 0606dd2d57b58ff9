"""The pure part of running a process inside an unpacked OCI image (``_oci``): what the image's
runtime config says, and the exact ``unshare`` command line built from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aviflow_testcluster import _oci


def bundle(tmp_path: Path) -> _oci.Bundle:
    config = {
        "process": {
            "args": ["/usr/bin/tini", "--", "jupyterhub"],
            "env": ["PATH=/opt/aviflow/bin:/usr/bin:/bin", "LANG=C.UTF-8", "BROKEN"],
            "cwd": "/srv/jupyterhub",
            "user": {"uid": 1000, "gid": 1000},
        }
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    return _oci.Bundle(tmp_path, "sha256:abc")


def test_the_image_process_comes_from_its_runtime_config(tmp_path: Path) -> None:
    assert bundle(tmp_path).process() == _oci.ImageProcess(
        args=("/usr/bin/tini", "--", "jupyterhub"),
        env=(("PATH", "/opt/aviflow/bin:/usr/bin:/bin"), ("LANG", "C.UTF-8")),
        cwd="/srv/jupyterhub",
        uid=1000,
        gid=1000,
    )


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
        f"ROOTFS={tmp_path / 'rootfs'}",
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
        _oci.unpack(tmp_path, "1.0", tmp_path / "cache")
    assert str(e.value) == f"no image '1.0' in the OCI layout {tmp_path}"
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())
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
    assert in_root(tmp_path, "/var/run/secrets/kubernetes.io/serviceaccount") == (
        "/run/secrets/kubernetes.io/serviceaccount"
    )
    assert in_root(tmp_path, "/var/lock/x") == "/run/lock/x"
    assert in_root(tmp_path, "/../../etc/hosts") == "/etc/hosts"  # never above the root
    with pytest.raises(ImageError, match="too many symbolic links"):
        in_root(tmp_path, "/loop/x")
