#!/usr/bin/env bash
# The base of every Aviflow image: a minimal Debian bookworm root filesystem built with
# mmdebstrap from this machine's apt mirror (no registry, no base image pulled). With
# SOURCE_DATE_EPOCH fixed the tarball is reproducible while the mirror's package set is the
# same: two builds give the same sha256 (images/README.md).
#
#   images/base/build.sh [OUT]      # default OUT: images/.build/base/rootfs.tar
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../.build/base/rootfs.tar}
mkdir -p "$(dirname "$out")"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1700000000}
packages=$(grep -v '^#' "$here/packages.txt" | xargs | tr ' ' ',')
tmp="${out%.tar}.tmp$$.tar"
trap 'rm -f "$tmp"' EXIT
mmdebstrap --quiet --variant=minbase --include="$packages" \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  bookworm "$tmp"
mv "$tmp" "$out"
sha256sum "$out" | cut -d' ' -f1 > "$out.sha256"
echo "$out $(cat "$out.sha256") $(du -h "$out" | cut -f1)"
