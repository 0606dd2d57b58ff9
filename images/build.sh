#!/usr/bin/env bash
# make images: the base, then the hub, notebook and trainer images with buildah (chroot
# isolation, layer cache, --timestamp 0), tagged <version>-<lock hash>. What builds them is kept
# in the build cache every clone of this machine shares (`python -m aviflow_testcluster cache`,
# tests/cluster/aviflow_testcluster/_image_store.py): the base root filesystem, the wheelhouse,
# the proxy, buildah's layer store and one OCI layout whose refs name each build by content
# (<name>-<tag>-<image id>), so a clone builds, pushes and unpacks nothing another one already
# did. This checkout's images/.build/oci is a layout naming its own images (refs
# <name>-<version>-<lock hash>) on the shared blobs. No Docker engine and no registry are
# needed; REGISTRY=host/path also pushes each image there. Writes images/.build/images.jsonl
# (tag, digest, size, build time, pinned packages) and images/.build/trainer-images.yaml (the
# trainer's entry for `images`).
#
#   images/build.sh [NAME ...]       # default: hub notebook trainer
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${IMAGES_BUILD_DIR:-$root/images/.build}
python=${PYTHON:-$root/.venv/bin/python}
names=("$@")
((${#names[@]})) || names=(hub notebook trainer)
chp_version=4.6.3
cache() { PYTHONPATH="$root/tests/cluster${PYTHONPATH:+:$PYTHONPATH}" "$python" -m aviflow_testcluster cache "$@"; }

version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
lock_hash=$(sha256sum requirements.lock | cut -c1-12)
tag=$version-$lock_hash
source=${SOURCE_URL:-https://github.com/aviflow/aviflow}
base_key=$(cat images/base/packages.txt images/base/build.sh images/base/Containerfile | sha256sum | cut -c1-16)
# the cache's paths: IMAGES_CACHE STORAGE RUNROOT LAYOUT REFS IMAGES_LOCK, and BASE, WHEELS,
# PROXY as <name>_DIR (the entry) and <name>_READY (1 when it is made)
eval "$(cache images-env "$base_key" "$lock_hash" "$chp_version")"
store=(--root "$STORAGE" --runroot "$RUNROOT" --storage-driver "${STORAGE_DRIVER:-overlay}")
mkdir -p "$IMAGES_CACHE" "$REFS" "$build/context"
# One build at a time on this machine (parallel test sessions, other clones, `make images`).
exec 9> "$IMAGES_LOCK"
flock 9
eval "$(cache images-env "$base_key" "$lock_hash" "$chp_version")"  # as it is now, locked
report=$build/images.jsonl
: > "$report"

# make_entry DIR CMD...: CMD... TMP fills a new directory TMP, which then becomes the entry DIR
make_entry() {
  local dir=$1 && shift
  local tmp
  tmp=$(dirname "$dir")/.$(basename "$dir").tmp$$
  rm -rf "$tmp" && mkdir -p "$tmp"
  "$@" "$tmp"
  cache seal "$tmp"
  rm -rf "$dir" && mv "$tmp" "$dir"
}
make_base() { bash images/base/build.sh "$1/rootfs.tar"; }
make_wheels() { "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$1" -r requirements.lock; }
make_proxy() {
  npm install --silent --no-fund --no-audit --omit=dev --prefix "$1" "configurable-http-proxy@$chp_version"
}

# 1. the base root filesystem (mmdebstrap), rebuilt when its package list or script changes
[[ -n $BASE_READY ]] || make_entry "$BASE_DIR" make_base
base=localhost/aviflow/base:$(cat "$BASE_DIR/rootfs.tar.sha256" images/base/Containerfile | sha256sum | cut -c1-12)
if ! buildah "${store[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  buildah "${store[@]}" bud --quiet --isolation chroot --timestamp 0 \
    -f images/base/Containerfile -t "$base" "$BASE_DIR" >/dev/null
  changed=1
fi

# 2. the wheelhouse (every wheel of the lock; the builds install offline from it), the aviflow
#    wheel and configurable-http-proxy
wheels=$WHEELS_DIR
[[ -n $WHEELS_READY ]] || make_entry "$WHEELS_DIR" make_wheels
rm -rf "$build/context/wheels"
# (a fixed SOURCE_DATE_EPOCH makes the wheel, and so the layers above it, the same each time)
SOURCE_DATE_EPOCH=1700000000 "$root/.venv/bin/uv" build --quiet --wheel \
  --out-dir "$build/context/wheels" "$root"
[[ -n $PROXY_READY ]] || make_entry "$PROXY_DIR" make_proxy
rm -rf "$build/context/configurable-http-proxy"
cp -a "$PROXY_DIR" "$build/context/configurable-http-proxy"
rm -f "$build/context/configurable-http-proxy/.aviflow-entry"

# This checkout's layout: its own index on the shared blobs (a layout of its own from before
# the shared cache is replaced).
mine=$build/oci
if [[ -e $mine && ! -L $mine/blobs ]]; then rm -rf "$mine"; fi
mkdir -p "$mine" "$LAYOUT"
[[ -f $LAYOUT/oci-layout ]] || printf '{"imageLayoutVersion":"1.0.0"}' > "$LAYOUT/oci-layout"
[[ -f $LAYOUT/index.json ]] || printf '{"schemaVersion":2,"manifests":[]}' > "$LAYOUT/index.json"
mkdir -p "$LAYOUT/blobs"
cp "$LAYOUT/oci-layout" "$mine/oci-layout"
[[ -f $mine/index.json ]] || printf '{"schemaVersion":2,"manifests":[]}' > "$mine/index.json"
ln -sfn "$LAYOUT/blobs" "$mine/blobs"

# 3. the images (the notebook image is built on the trainer image)
[[ " ${names[*]} " == *" notebook "* && " ${names[*]} " != *" trainer "* ]] && names=(trainer "${names[@]}")
ordered=()
for name in hub trainer notebook; do
  [[ " ${names[*]} " == *" $name "* ]] && ordered+=("$name")
done
for name in "${names[@]}"; do
  [[ -f images/$name/Containerfile ]] || { echo "images/build.sh: no image $name (hub, notebook, trainer)" >&2; exit 2; }
done
for name in "${ordered[@]}"; do
  image=localhost/aviflow/$name:$tag
  start=$(date +%s.%N)
  buildah "${store[@]}" bud --quiet --layers --isolation chroot --timestamp 0 \
    --volume "$wheels:/wheels:ro" \
    --build-arg "BASE=$base" --build-arg "TRAINER=localhost/aviflow/trainer:$tag" \
    --label "org.opencontainers.image.title=aviflow-$name" \
    --label "org.opencontainers.image.version=$version" \
    --label "org.opencontainers.image.source=$source" \
    --label "dev.aviflow.lock-hash=$lock_hash" \
    -f "images/$name/Containerfile" -t "$image" . >/dev/null
  built=$(date +%s.%N)
  id=$(buildah "${store[@]}" inspect --type image --format '{{.FromImageID}}' "$image")
  # the shared layout names each build by content (the notebook shares the trainer's blobs):
  # pushed only when no clone did it before
  build_ref=$name-$tag-${id:0:12}
  if ! "$python" - "$LAYOUT" "$build_ref" <<'PY'
import json, sys
from pathlib import Path
layout, ref = Path(sys.argv[1]), sys.argv[2]
index = json.loads((layout / "index.json").read_text())
found = [m for m in index["manifests"] if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref]
sys.exit(0 if found and (layout / "blobs" / found[0]["digest"].replace(":", "/")).is_file() else 1)
PY
  then
    umoci rm --image "$LAYOUT:$build_ref" 2>/dev/null || true
    buildah "${store[@]}" push --quiet "$image" "oci:$LAYOUT:$build_ref"
    changed=1
  fi
  printf '{"name": "%s", "id": "%s"}\n' "$name" "$id" > "$REFS/$build_ref"  # (its last use)
  if [[ -n ${REGISTRY:-} ]]; then
    buildah "${store[@]}" push --quiet "$image" "docker://$REGISTRY/$name:$tag"
  fi
  "$python" - "$report" "$name" "$image" "$tag" "$lock_hash" "$mine" "$start" "$built" \
    "$version" "${REGISTRY:+$REGISTRY/$name:$tag}" "$LAYOUT" "$build_ref" <<'PY'
import json, os, re, sys, time
from pathlib import Path
report, name, image, tag, lock_hash, layout, start, built, version, pushed, shared, build_ref = sys.argv[1:]
# what a notebook should match (aviflow.images.TRACKED): the lock's pins and our version
pins = dict(re.findall(r"^(torch|accelerate)==(\S+)", Path("requirements.lock").read_text(), re.M))
packages = {**(pins if name != "hub" else {}), "aviflow": version}
# this checkout's layout names the build <name>-<tag>, with the shared layout's descriptor
ref_key = "org.opencontainers.image.ref.name"
built_by = next(
    m for m in json.loads((Path(shared) / "index.json").read_text())["manifests"]
    if m.get("annotations", {}).get(ref_key) == build_ref
)
ref = f"{name}-{tag}"
index_path = Path(layout) / "index.json"
index = json.loads(index_path.read_text())
index["manifests"] = [
    m for m in index["manifests"] if m.get("annotations", {}).get(ref_key) != ref
] + [{**built_by, "annotations": {**built_by.get("annotations", {}), ref_key: ref}}]
index_path.with_name("index.json.tmp").write_text(json.dumps(index))
os.replace(index_path.with_name("index.json.tmp"), index_path)
digest = built_by["digest"]
blob = lambda d: Path(layout) / "blobs" / d.replace(":", "/")
manifest = json.loads(blob(digest).read_text())
config = json.loads(blob(manifest["config"]["digest"]).read_text())
row = {
    "name": name, "image": image, "tag": tag, "lockHash": lock_hash, "digest": digest,
    "layout": layout, "ref": ref, "user": config["config"].get("User", ""),
    "compressedBytes": sum(layer["size"] for layer in manifest["layers"]),
    "buildSeconds": round(float(built) - float(start), 1),
    "pushSeconds": round(time.time() - float(built), 1),
    "packages": packages, "pushed": pushed,
}
with open(report, "a") as f:
    f.write(json.dumps(row) + "\n")
print(f"{image}  {digest[:19]}  {row['compressedBytes'] / 1e6:.0f} MB compressed  "
      f"built in {row['buildSeconds']} s, exported in {row['pushSeconds']} s")
PY
done

# 4. the trainer's entry for the cluster settings' `images` list (api.kubernetes.images in
#    the hub config): what --image picks it by, and the versions notebooks are checked against
"$python" - "$report" "$build/trainer-images.yaml" <<'PY'
import json, sys
from pathlib import Path
import yaml
rows = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
for row in rows:
    if row["name"] == "trainer":
        entry = {
            "name": f"trainer-{row['lockHash']}", "image": row["pushed"] or row["image"],
            "lockHash": row["lockHash"], "packages": row["packages"],
        }
        Path(sys.argv[2]).write_text(
            "# written by images/build.sh: add it to api.kubernetes.images in the hub config\n"
            + yaml.safe_dump({"images": [entry]}, sort_keys=False)
        )
PY

# 5. the cache within its bound: image builds and entries no clone used for longest go first
#    (the stores are measured again after a build wrote to them)
cache images-prune ${changed:+changed}
