#!/usr/bin/env bash
# make images: the base, then the hub, notebook and trainer images with buildah (chroot
# isolation, layer cache, --timestamp 0), into the OCI layout images/.build/oci, tagged
# <version>-<lock hash> (refs <name>-<version>-<lock hash> in the layout). No Docker engine and no registry are needed; REGISTRY=host/path also
# pushes each image there. Writes images/.build/images.jsonl (tag, digest, size, build time,
# pinned packages) and images/.build/trainer-images.yaml (the trainer's entry for `images`).
#
#   images/build.sh [NAME ...]       # default: hub notebook trainer
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=${IMAGES_BUILD_DIR:-$root/images/.build}
python=${PYTHON:-$root/.venv/bin/python}
names=("$@")
((${#names[@]})) || names=(hub notebook trainer)
ca=${EGRESS_CA:-${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}}
chp_version=4.6.3
store=(--root "$build/storage" --runroot "$build/run" --storage-driver "${STORAGE_DRIVER:-overlay}")

version=$("$python" -c 'import tomllib; print(tomllib.load(open("pyproject.toml", "rb"))["project"]["version"])')
lock_hash=$(sha256sum requirements.lock | cut -c1-12)
tag=$version-$lock_hash
source=${SOURCE_URL:-https://github.com/aviflow/aviflow}
mkdir -p "$build/context" "$build/pushed"
# One build at a time per checkout (parallel test sessions, a `make images` meanwhile).
exec 9> "$build/.lock"
flock 9
report=$build/images.jsonl
: > "$report"

# 1. the base root filesystem (mmdebstrap), rebuilt when its package list or script changes
base_key=$(cat images/base/packages.txt images/base/build.sh images/base/Containerfile | sha256sum | cut -c1-12)
if [[ ! -f $build/base/rootfs.tar || "$(cat "$build/base/key" 2>/dev/null)" != "$base_key" ]]; then
  bash images/base/build.sh "$build/base/rootfs.tar"
  echo "$base_key" > "$build/base/key"
fi
base=localhost/aviflow/base:$(cat "$build/base/rootfs.tar.sha256" images/base/Containerfile | sha256sum | cut -c1-12)
if ! buildah "${store[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  buildah "${store[@]}" bud --quiet --isolation chroot --timestamp 0 \
    -f images/base/Containerfile -t "$base" "$build/base" >/dev/null
fi

# 2. the wheelhouse (every wheel of the lock; the builds install offline from it), the aviflow
#    wheel and configurable-http-proxy
wheels=$build/wheelhouse
if [[ "$(cat "$wheels/.lock-hash" 2>/dev/null)" != "$lock_hash" ]]; then
  mkdir -p "$wheels"
  "$python" -m pip download --quiet --no-deps --only-binary=:all: -d "$wheels" -r requirements.lock
  echo "$lock_hash" > "$wheels/.lock-hash"
fi
rm -rf "$build/context/wheels"
# (a fixed SOURCE_DATE_EPOCH makes the wheel, and so the layers above it, the same each time)
SOURCE_DATE_EPOCH=1700000000 "$root/.venv/bin/uv" build --quiet --wheel \
  --out-dir "$build/context/wheels" "$root"
chp=$build/context/configurable-http-proxy
if [[ "$(cat "$chp/version" 2>/dev/null)" != "$chp_version" ]]; then
  rm -rf "$chp"
  npm install --silent --no-fund --no-audit --omit=dev --prefix "$chp" \
    "configurable-http-proxy@$chp_version"
  echo "$chp_version" > "$chp/version"
fi

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
  # one layout for all images, so the notebook shares the trainer's blobs; ref <name>-<tag>
  if [[ "$(cat "$build/pushed/$name" 2>/dev/null)" != "$id:$tag" ]] ||
    ! grep -q "\"$name-$tag\"" "$build/oci/index.json" 2>/dev/null; then
    # (buildah leaves the manifest the ref named before in the index, untagged: untag it
    #  first, so that `umoci gc` below frees its blobs)
    umoci rm --image "$build/oci:$name-$tag" 2>/dev/null || true
    buildah "${store[@]}" push --quiet "$image" "oci:$build/oci:$name-$tag"
    echo "$id:$tag" > "$build/pushed/$name"
    collect=1
  fi
  if [[ -n ${REGISTRY:-} ]]; then
    buildah "${store[@]}" push --quiet "$image" "docker://$REGISTRY/$name:$tag"
  fi
  "$python" - "$report" "$name" "$image" "$tag" "$lock_hash" "$build/oci" "$start" "$built" \
    "$version" "${REGISTRY:+$REGISTRY/$name:$tag}" <<'PY'
import json, re, sys, time
from pathlib import Path
report, name, image, tag, lock_hash, layout, start, built, version, pushed = sys.argv[1:]
# what a notebook should match (aviflow.images.TRACKED): the lock's pins and our version
pins = dict(re.findall(r"^(torch|accelerate)==(\S+)", Path("requirements.lock").read_text(), re.M))
packages = {**(pins if name != "hub" else {}), "aviflow": version}
index = json.loads((Path(layout) / "index.json").read_text())
ref = f"{name}-{tag}"
digest = next(
    m["digest"] for m in index["manifests"]
    if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == ref
)
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

# 5. what no image refers to any more: blobs of the layout (umoci gc), and unpacked images
#    (the image tests', the test cluster's node agent's) of digests it no longer has
#    (gc reads every blob, about a minute for the trainer's: only after a push)
if [[ -n ${collect:-} ]]; then
  umoci gc --layout "$build/oci"
fi
if [[ -d $build/bundles ]]; then
  keep=$(grep -o 'sha256:[0-9a-f]*' "$build/oci/index.json" | tr : - | sort -u)
  for bundle in "$build"/bundles/sha256-*; do
    [[ -d $bundle ]] || continue
    grep -qx "$(basename "$bundle")" <<< "$keep" || rm -rf "$bundle"
  done
fi
