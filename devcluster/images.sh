#!/usr/bin/env bash
# Build (or reuse) the OCI images the dev cluster's real node runs, without a Docker daemon.
#
#   images.sh [NAME...]     NAME: base pause coredns operator trainer trainer-mindspore prometheus
#                                 prometheus-config-reloader prometheus-operator kueue
#                                 kube-network-policies
#                                 (default: pause coredns operator trainer)
#
# trainer-mindspore (trainer-image/Dockerfile.mindspore: the MindSpore CPU wheel, no torch; a
# few GB) is built only when named: the MindSpore end-to-end test asks for it.
#
# Why this way: these machines have no Docker engine and no registry, but they have Debian's
# buildah and mmdebstrap. The project's own Dockerfiles build unchanged with
# `buildah bud` (they keep working with docker/buildkit elsewhere); their base image
# (`python:3.11-slim`) is a Debian bookworm root filesystem made here by mmdebstrap, because
# bookworm's python3.11 matches it. pause and CoreDNS are single static binaries, built from the
# Kubernetes and CoreDNS Go modules.
#
# Each image is kept in buildah's storage under ~/.cache/dpjob/buildah, tagged by a hash of its
# inputs, so a second run takes seconds and an input change rebuilds only that image (and only the
# layers after the change: the trainer's multi-GB virtualenv layer is built once). Nothing here
# reaches a node: devcluster/publish.py pushes the images to a registry, the dev cluster's own
# (devcluster/registry.py) or a user's, and the kubelet pulls them from there.
#
# Corporate networks and these machines pass package downloads through a TLS proxy whose CA only
# the host trusts: the host's pip configuration (`pip config list`: index-url, cert, ...) and the
# CA files it names are mounted into every build step, never baked into an image.
# DPJOB_BUILD_CA_BUNDLE names an extra CA bundle to trust the same way.
#
# Prints `NAME REF` per image on stdout (REF: the local buildah tag); progress goes to stderr,
# build logs to files.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
IMAGES="$CACHE_ROOT/images"
LOGS="$CACHE_ROOT/logs"
mkdir -p "$IMAGES" "$LOGS"
K8S_VERSION=${K8S_VERSION:-1.36.3}
PAUSE_VERSION=3.10
SUITE=bookworm
BASE_PACKAGES="python3,python3-venv,python3-pip,python-is-python3,ca-certificates"
BASE_REF=docker.io/library/python:3.11-slim
TORCH_SPEC=${TORCH_SPEC:-$(grep -E '^torch==' "$ROOT/requirements.lock")}

log() { echo "[images] $*" >&2; }
die() { echo "[images] $*" >&2; exit 1; }
bash "$ROOT/devcluster/sysdeps.sh" images
BUILDAH=(buildah --root "$CACHE_ROOT/buildah/storage" --runroot "$CACHE_ROOT/buildah/run" --storage-driver overlay)
# One build at a time per machine (make dev and a CI clone may ask together): builds share storage.
exec 9>"$IMAGES/.lock"
flock 9
# OCI archives of an earlier layout of this cache: images now live in buildah's storage only.
find "$IMAGES" -maxdepth 1 ! -name 'rootfs-*' -regextype posix-extended -regex '.*/[a-z-]+-[0-9a-f]{12}\.tar(\.complete)?' -delete
# Keep at most this much of buildah's layer cache; past it, drop the cache of superseded builds.
STORAGE_CAP_GB=${DPJOB_BUILDAH_CACHE_GB:-30}

tidy_storage() {  # working containers of interrupted builds, superseded tags, an oversized cache
  local keep=$1 repo=${1%:*} old
  "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
  for old in $("${BUILDAH[@]}" images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | grep "^$repo:" | grep -vx "$keep"); do
    "${BUILDAH[@]}" rmi -f "$old" >/dev/null 2>&1 || true
  done
  if [ "$(du -s --block-size=1G "$CACHE_ROOT/buildah/storage" 2>/dev/null | cut -f1)" -gt "$STORAGE_CAP_GB" ]; then
    log "buildah's layer cache is over ${STORAGE_CAP_GB} GiB: pruning superseded layers (DPJOB_BUILDAH_CACHE_GB)"
    "${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
  fi
}

hash_inputs() {  # hash_inputs STRING PATH... -> 12 hex chars over the string and every input file
  # Paths relative to the checkout, so every clone of the same commit (CI's included) gets the same
  # key; only files git would commit (tracked, or new and not ignored: never __pycache__ or the
  # editable install's *.egg-info).
  local extra=$1 rel=(); shift
  local p; for p in "$@"; do rel+=("${p#"$ROOT"/}"); done
  { echo "$extra"
    if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
      (cd "$ROOT" && git ls-files -z --cached --others --exclude-standard -- "${rel[@]}" | sort -z \
        | xargs -0 -r sha256sum)
    else
      (cd "$ROOT" && find "${rel[@]}" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' ! -path '*.egg-info/*' \
        -print0 | sort -z | xargs -0 sha256sum)
    fi; } | sha256sum | cut -c1-12
}

image_size() { "${BUILDAH[@]}" images --format '{{.Size}}' "$1" 2>/dev/null | head -1; }
have_image() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }

run_logged() {  # run_logged WHAT LOGFILE CMD...: quiet on success, the log's tail and one line on failure
  local what=$1 logfile=$2; shift 2
  if ! "$@" >"$logfile" 2>&1; then
    "${BUILDAH[@]}" rm --all >/dev/null 2>&1 || true
    tail -n 25 "$logfile" >&2
    die "$what failed: see $logfile"
  fi
}

# Build-time network settings: the host's pip configuration and the CA files it names.
build_volumes=()
prepare_build_network() {
  local conf="$CACHE_ROOT/buildah/pip.conf" line key value
  mkdir -p "$(dirname "$conf")"
  echo "[global]" > "$conf"
  while IFS= read -r line; do
    key=${line%%=*}; value=${line#*=}; value=${value#\'}; value=${value%\'}
    [[ $key == global.* ]] || continue
    echo "${key#global.} = $value" >> "$conf"
    if [[ $key == global.cert || $key == global.client-cert ]] && [ -f "$value" ]; then
      build_volumes+=(-v "$value:$value:ro")
    fi
  done < <(python3 -m pip config list 2>/dev/null || true)
  if [ -n "${DPJOB_BUILD_CA_BUNDLE:-}" ]; then
    [ -f "$DPJOB_BUILD_CA_BUNDLE" ] || die "DPJOB_BUILD_CA_BUNDLE=$DPJOB_BUILD_CA_BUNDLE is not a file"
    build_volumes+=(-v "$DPJOB_BUILD_CA_BUNDLE:/etc/dpjob-build-ca.pem:ro")
    grep -q '^cert' "$conf" || echo "cert = /etc/dpjob-build-ca.pem" >> "$conf"
  fi
  build_volumes+=(-v "$conf:/etc/pip.conf:ro")
}

package_index() {  # the index the host's pip uses (its configuration, else pip's own default)
  python3 -m pip config get global.index-url 2>/dev/null && return
  python3 -c 'from pip._internal.models.index import PyPI; print(PyPI.simple_url)'
}

# ------------------------------------------------------------------------------------------ base
BASE_KEY=$(echo "$SUITE minbase $BASE_PACKAGES v1" | sha256sum | cut -c1-12)
ensure_base() {
  local tarball="$IMAGES/rootfs-$SUITE-$BASE_KEY.tar"
  if [ "$("${BUILDAH[@]}" inspect --type image --format '{{index .ImageAnnotations "io.dpjob.base"}}' "$BASE_REF" 2>/dev/null)" = "$BASE_KEY" ]; then
    return
  fi
  if [ ! -s "$tarball" ] || [ ! -f "$tarball.complete" ]; then
    local t0=$SECONDS
    log "base: Debian $SUITE root filesystem with python3 (mmdebstrap, about 1 min)"
    rm -f "$tarball"
    run_logged "mmdebstrap $SUITE" "$LOGS/image-base.log" \
      mmdebstrap --variant=minbase --include="$BASE_PACKAGES" "$SUITE" "$tarball"
    touch "$tarball.complete"
    log "base: root filesystem ready in $((SECONDS - t0))s"
  fi
  local c
  c=$("${BUILDAH[@]}" from --quiet scratch)
  "${BUILDAH[@]}" add --quiet "$c" "$tarball" / >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin --env LANG=C.UTF-8 \
    --cmd python3 --annotation "io.dpjob.base=$BASE_KEY" "$c"
  "${BUILDAH[@]}" commit --quiet "$c" "$BASE_REF" >/dev/null
  "${BUILDAH[@]}" rm "$c" >/dev/null
}

# --------------------------------------------------------------------------- Dockerfile images
build_dockerfile() {  # NAME DOCKERFILE CONTEXT KEY [build args...]
  local name=$1 dockerfile=$2 context=$3 key=$4; shift 4
  local ref="localhost/dpjob/$name:dev-$key"
  if ! have_image "$ref"; then
    ensure_base
    [ ${#build_volumes[@]} -gt 0 ] || prepare_build_network
    local t0=$SECONDS
    log "$name: buildah bud -f ${dockerfile#"$ROOT"/} (log: $LOGS/image-$name.log)"
    run_logged "building the $name image" "$LOGS/image-$name.log" \
      "${BUILDAH[@]}" bud --layers --isolation chroot --pull-never "${build_volumes[@]}" "$@" \
      -f "$dockerfile" -t "$ref" "$context"
    tidy_storage "$ref"
    log "$name: built in $((SECONDS - t0))s ($(image_size "$ref"))"
  fi
  echo "$name $ref"
}

image_operator() {
  local key
  key=$(hash_inputs "$BASE_KEY" "$ROOT/operator" "$ROOT/pyproject.toml" "$ROOT/requirements.lock" \
        "$ROOT/README.md" "$ROOT/.dockerignore")
  build_dockerfile operator "$ROOT/operator/Dockerfile" "$ROOT" "$key"
}

image_trainer() {
  local key index
  key=$(hash_inputs "$BASE_KEY $TORCH_SPEC" "$ROOT/trainer-image")
  index=$(package_index)
  build_dockerfile trainer "$ROOT/trainer-image/Dockerfile" "$ROOT/trainer-image" "$key" \
    --build-arg "TORCH_INDEX=$index" --build-arg "TORCH_SPEC=$TORCH_SPEC"
}

image_trainer-mindspore() {
  # Only what Dockerfile.mindspore reads: a change to the torch Dockerfile does not rebuild it.
  # Its packages come from the pinned lock through the host's pip configuration, as the trainer's.
  local key
  key=$(hash_inputs "$BASE_KEY" "$ROOT/trainer-image/Dockerfile.mindspore" \
        "$ROOT/trainer-image/requirements-mindspore.lock" "$ROOT/trainer-image/dpjob_trainer")
  build_dockerfile trainer-mindspore "$ROOT/trainer-image/Dockerfile.mindspore" "$ROOT/trainer-image" "$key"
}

# ------------------------------------------------------------------- single static binaries
build_binary_image() {  # NAME VERSION BINARY [DEST]: one static binary at DEST (default /NAME-of-binary)
  local name=$1 version=$2 binary=$3 dest=${4:-/$(basename "$3")}
  local key ref
  key=$({ sha256sum "$binary"; echo "$dest"; } | sha256sum | cut -c1-12)
  ref="localhost/dpjob/$name:$version-$key"
  if ! have_image "$ref"; then
    log "$name: image from $(basename "$binary")"
    local c
    c=$("${BUILDAH[@]}" from --quiet scratch)
    "${BUILDAH[@]}" copy --quiet "$c" "$binary" "$dest" >/dev/null
    "${BUILDAH[@]}" config --entrypoint "[\"$dest\"]" --user 65534:65534 "$c"
    "${BUILDAH[@]}" commit --quiet "$c" "$ref" >/dev/null
    "${BUILDAH[@]}" rm "$c" >/dev/null
    tidy_storage "$ref"
  fi
  echo "$name $ref"
}

image_pause() {
  # The pod sandbox: build/pause/linux/pause.c ships in the k8s.io/kubernetes module.
  local src out="$CACHE_ROOT/tools/pause-$PAUSE_VERSION/pause"
  if [ ! -x "$out" ]; then
    local go; go=$(bash "$ROOT/devcluster/go.sh" | tail -1)
    src=$(cd "$CACHE_ROOT" && "$go" mod download -json "k8s.io/kubernetes@v$K8S_VERSION" \
          | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')/build/pause/linux/pause.c
    [ -f "$src" ] || die "pause.c not found in the k8s.io/kubernetes v$K8S_VERSION module ($src)"
    mkdir -p "$(dirname "$out")"
    run_logged "compiling pause.c" "$LOGS/image-pause.log" gcc -Os -static -DVERSION="$PAUSE_VERSION" -o "$out" "$src"
  fi
  build_binary_image pause "$PAUSE_VERSION" "$out"
}

image_from_tool() {  # NAME LINK [DEST]: a single-binary image of a tool build.sh made, tagged by its version
  local name=$1 bin_dir binary version
  bin_dir=$(bash "$ROOT/devcluster/build.sh" | tail -1)
  binary=$(readlink -f "$bin_dir/$2")
  [ -x "$binary" ] || die "$2 binary missing in $bin_dir: run bash devcluster/build.sh"
  version=$(basename "$(dirname "$binary")"); version=${version##*-}
  build_binary_image "$name" "$version" "$binary" "${3:-}"
}

# Where the upstream images keep them: the Prometheus Operator runs /bin/prometheus-config-reloader
# by path, and its StatefulSet relies on the Prometheus image's entrypoint.
image_prometheus() { image_from_tool prometheus prometheus /bin/prometheus; }
image_prometheus-config-reloader() {
  image_from_tool prometheus-config-reloader prometheus-config-reloader /bin/prometheus-config-reloader; }
image_prometheus-operator() { image_from_tool prometheus-operator prometheus-operator /bin/operator; }

image_coredns() { image_from_tool coredns coredns; }

image_kueue() {  # Kueue's controller at /manager, where its own image keeps it (devcluster/build-kueue.sh)
  local tool version
  tool=$(bash "$ROOT/devcluster/build-kueue.sh" | tail -1)
  version=$(basename "$tool"); version=${version#kueue-}
  build_binary_image kueue "$version" "$tool/manager" /manager
}

image_kube-network-policies() {  # the NetworkPolicy engine at /bin/netpol, as its own image has it
  local tool version
  tool=$(bash "$ROOT/devcluster/build-netpol.sh" | tail -1)
  version=$(basename "$tool"); version=${version#kube-network-policies-}
  build_binary_image kube-network-policies "$version" "$tool/netpol" /bin/netpol
}

names=("$@")
[ ${#names[@]} -gt 0 ] || names=(pause coredns operator trainer)
for n in "${names[@]}"; do
  case $n in
    base) ensure_base ;;
    pause|coredns|operator|trainer|trainer-mindspore|prometheus|prometheus-config-reloader|prometheus-operator|kueue|kube-network-policies)
      "image_$n" ;;
    *) die "unknown image '$n' (known: base pause coredns operator trainer trainer-mindspore prometheus" \
         "prometheus-config-reloader prometheus-operator kueue kube-network-policies)" ;;
  esac
done
