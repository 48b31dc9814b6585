#!/usr/bin/env bash
# Build (or reuse) the real peer for bench/compare.py: Kubeflow's training-operator (PyTorchJob),
# from its Go module, the way devcluster/build.sh builds the control plane. Cached under
# ~/.cache/dpjob/tools/training-operator-<version>/ (binary + the module's CRDs), so a second run
# takes a second. A cold build is about 9 minutes on 2 cores; the full Go output goes to
# ~/.cache/dpjob/logs/build-training-operator.log.
# Prints the tool directory on the last line of stdout.
set -euo pipefail

VERSION=${KUBEFLOW_TRAINING_OPERATOR_VERSION:-1.8.1}
MODULE=github.com/kubeflow/training-operator
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
OUT="$CACHE_ROOT/tools/training-operator-$VERSION"
LOGS="$CACHE_ROOT/logs"
log() { echo "[kubeflow] $*" >&2; }

if [ -x "$OUT/training-operator" ] && [ -d "$OUT/crds" ]; then
  echo "$OUT"
  exit 0
fi
GO=$(bash "$(dirname "${BASH_SOURCE[0]}")/go.sh" | tail -1) || exit 1
export PATH="$(dirname "$GO"):$PATH"
mkdir -p "$CACHE_ROOT/tools" "$LOGS"
exec 9>"$CACHE_ROOT/.build.lock"  # one Go build at a time per machine (shared with build.sh)
if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-local}

build() {
  set -euo pipefail
  local src stage
  src=$(go mod download -json "$MODULE@v$VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  # The module cache is read-only and the module's go.mod pins its own dependencies: build in a
  # writable copy, exactly as `go build ./cmd/training-operator.v1` in a clone would.
  stage="$CACHE_ROOT/tools/.training-operator-$VERSION-src"
  rm -rf "$stage" && mkdir -p "$stage" && cp -r "$src/." "$stage/" && chmod -R u+w "$stage"
  (cd "$stage" && go build -mod=mod -p 2 -ldflags "-s -w" -o "$OUT.tmp/training-operator" ./cmd/training-operator.v1)
  cp -r "$src/manifests/base/crds" "$OUT.tmp/crds" && chmod -R u+w "$OUT.tmp/crds"
  rm -rf "$stage"
}

log "training-operator v$VERSION: building from Go modules, usually ~9 min cold on 2 cores (log: $LOGS/build-training-operator.log)"
t0=$SECONDS
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
if ! build >"$LOGS/build-training-operator.log" 2>&1; then
  tail -n 20 "$LOGS/build-training-operator.log" >&2
  log "building training-operator failed after $((SECONDS - t0))s: see $LOGS/build-training-operator.log (a network error: re-run)"
  exit 1
fi
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "training-operator: done in $((SECONDS - t0))s"
echo "$OUT"
