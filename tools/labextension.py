"""``make labextension``'s build step: the JupyterLab extension's prebuilt bundle
(``extensions/aviflow_jupyter/labextension``), taken from the build cache when any clone on
this machine built the same sources, else built with JupyterLab's builder and kept there.

The bundler names some modules by their absolute paths, so two checkouts of the same commit
build bundles that differ byte for byte; the wheel ships the bundle, and the images install the
wheel. One build per content keeps the wheel, and so every image layer above it, the same in
every clone (``images/build.sh`` then rebuilds and pushes nothing).

    .venv/bin/python tools/labextension.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "cluster"))

from aviflow_testcluster import _cache  # noqa: E402

SOURCE = ROOT / "extensions" / "labextension"
OUT = ROOT / "extensions" / "aviflow_jupyter" / "labextension"
# what decides the bundle: the sources, the npm lock, and the lock that pins JupyterLab's
# builder in .venv
INPUTS = ("package.json", "package-lock.json", "tsconfig.json", "src", "style")


def key() -> str:
    files = sorted(
        p
        for name in INPUTS
        for p in ([SOURCE / name] if (SOURCE / name).is_file() else (SOURCE / name).rglob("*"))
        if p.is_file()
    )
    parts: list[str | Path] = []
    for f in files:
        parts += [str(f.relative_to(SOURCE)), f]
    return _cache.key_of(*parts, ROOT / "requirements.lock")


def build(tmp: Path) -> None:
    print(f"building the JupyterLab extension into the build cache ({tmp.parent})", flush=True)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    subprocess.run(["npm", "run", "--silent", "build"], cwd=SOURCE, env=env, check=True)
    shutil.copytree(OUT, tmp, dirs_exist_ok=True)


def main() -> int:
    entry = _cache.default_cache().entry("labextension", key())
    made = entry.ensure(build)
    shutil.rmtree(OUT, ignore_errors=True)
    shutil.copytree(made, OUT, ignore=shutil.ignore_patterns(_cache.META))
    return 0


if __name__ == "__main__":
    sys.exit(main())
