"""images/base (issue 10, first step): the minimal Debian root filesystem is built by
mmdebstrap from the apt mirror, without any registry, and is reproducible: two builds give
the same sha256."""

from __future__ import annotations

import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / "base" / "build.sh"

pytestmark = pytest.mark.timeout(600)


def build(*outs: Path) -> list[str]:
    """Build the base into each of ``outs`` at once (mmdebstrap waits on the mirror much of
    the time) and return their sha256s."""
    procs = [
        subprocess.Popen([str(BUILD), str(out)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for out in outs
    ]
    try:
        for proc in procs:
            output = proc.communicate(timeout=540)[0]
            assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
    finally:
        for proc in procs:  # none is left running when one failed
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return [(out.parent / (out.name + ".sha256")).read_text().strip() for out in outs]


def test_two_builds_of_the_base_give_the_same_digest(tmp_path: Path) -> None:
    first, second = build(tmp_path / "a" / "rootfs.tar", tmp_path / "b" / "rootfs.tar")
    assert first == second and len(first) == 64
    with tarfile.open(tmp_path / "a" / "rootfs.tar") as tar:
        names = set(tar.getnames())
        mtimes = {m.mtime for m in tar.getmembers()}
    assert {"./usr/bin/python3", "./usr/bin/tini", "./etc/ssl/certs/ca-certificates.crt"} <= names
    assert not any(n.startswith("./var/lib/apt/lists/") and n.endswith("_Packages") for n in names)
    assert max(mtimes) <= 1700000000  # SOURCE_DATE_EPOCH clamps every time stamp
    assert not list((tmp_path / "a").glob("*.tmp*"))  # nothing half-written is left
