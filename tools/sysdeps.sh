#!/usr/bin/env bash
# Installs what the test suite drives for real and cannot get from PyPI. Idempotent and quick
# when everything is present; each section belongs to the feature whose tests need it.
set -euo pipefail
need_apt=()
# (sections are added by the features that need them)
# --- hub (issue 5): PostgreSQL server binaries for the ledger tests (the tests start a
# throwaway cluster with initdb/pg_ctl), and configurable-http-proxy from npm for the real
# JupyterHub the hub tests and `make hub` start.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  need_apt+=(postgresql)
fi
if ! command -v configurable-http-proxy >/dev/null 2>&1; then
  npm install -g --no-fund --no-audit configurable-http-proxy@4.6.3
fi
# --- end hub
# --- notebook (issue 4): Debian's Chromium for the Playwright browser test of the panel
# (tests/notebook/test_browser.py launches /usr/bin/chromium; Playwright never downloads one).
if [[ ! -x /usr/bin/chromium ]]; then
  need_apt+=(chromium)
fi
# --- end notebook
# --- images (issue 10): mmdebstrap builds the base root filesystem (images/base/build.sh),
# buildah the images on it (images/build.sh), umoci unpacks them for the image tests.
for tool in mmdebstrap buildah umoci; do
  command -v "$tool" >/dev/null 2>&1 || need_apt+=("$tool")
done
# --- end images
if ((${#need_apt[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
