#!/usr/bin/env bash
# requirements.lock: every package of every extra, pinned, for CPython 3.11 on x86_64 Linux
# (the Python of the Debian bookworm images). One lock for .venv and all three images.
#
#   tools/lock.sh [OUT]     # default: requirements.lock (`make lock`)
# Pins already in OUT are kept (uv prefers them), so re-running it on a current lock changes
# nothing; tests/images/test_lock.py fails when pyproject.toml has moved on without it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/requirements.lock}
cd "$root"
"${UV:-$root/.venv/bin/uv}" pip compile --quiet pyproject.toml --all-extras \
  -c constraints.txt --python-version 3.11 --python-platform x86_64-manylinux_2_28 \
  --no-emit-package pip --custom-compile-command "make lock" -o "$out"
