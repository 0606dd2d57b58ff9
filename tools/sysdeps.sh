#!/usr/bin/env bash
# Installs what the test suite drives for real and cannot get from PyPI. Idempotent and quick
# when everything is present; each section belongs to the feature whose tests need it.
set -euo pipefail
need_apt=()
# (sections are added by the features that need them)
if ((${#need_apt[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
