#!/usr/bin/env bash
# Build (or reuse) Kueue from its Go module (sigs.k8s.io/kueue), the way devcluster/build.sh builds
# the control plane: the controller binary (`/manager` in Kueue's own image) and the module's Helm
# chart (charts/kueue), cached under ~/.cache/dpjob/tools/kueue-<version>/ so a second run takes a
# second. A cold build is about 4 minutes on 2 cores; the full Go output goes to
# ~/.cache/dpjob/logs/build-kueue.log. Prints the tool directory on the last line of stdout.
set -euo pipefail

VERSION=${KUEUE_VERSION:-0.17.0}
MODULE=sigs.k8s.io/kueue
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
OUT="$CACHE_ROOT/tools/kueue-$VERSION"
LOGS="$CACHE_ROOT/logs"
log() { echo "[kueue] $*" >&2; }

if [ -x "$OUT/manager" ] && [ -f "$OUT/chart/Chart.yaml" ]; then
  echo "$OUT"
  exit 0
fi
GO=$(bash "$(dirname "${BASH_SOURCE[0]}")/go.sh" | tail -1) || exit 1
export PATH="$(dirname "$GO"):$PATH"
mkdir -p "$CACHE_ROOT/tools" "$LOGS"
exec 9>"$CACHE_ROOT/.build.lock"  # one Go build at a time per machine (shared with build.sh)
if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
if [ -x "$OUT/manager" ] && [ -f "$OUT/chart/Chart.yaml" ]; then echo "$OUT"; exit 0; fi
export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-local}

build() {
  set -euo pipefail
  local src
  src=$(cd "$CACHE_ROOT" && go mod download -json "$MODULE@v$VERSION" \
        | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  # Inside the module its own go.mod and go.sum pin every dependency: `go build ./cmd/kueue` there
  # is exactly Kueue's `make build`, without the version stamp.
  (cd "$src" && go build -p 2 -ldflags "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=v$VERSION" \
     -o "$OUT.tmp/manager" ./cmd/kueue)
  cp -r "$src/charts/kueue" "$OUT.tmp/chart" && chmod -R u+w "$OUT.tmp/chart"
}

log "kueue v$VERSION: building from Go modules, usually ~4 min cold on 2 cores (log: $LOGS/build-kueue.log)"
t0=$SECONDS
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
if ! build >"$LOGS/build-kueue.log" 2>&1; then
  tail -n 20 "$LOGS/build-kueue.log" >&2
  log "building kueue failed after $((SECONDS - t0))s: see $LOGS/build-kueue.log (a network error: re-run)"
  exit 1
fi
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "kueue: done in $((SECONDS - t0))s"
echo "$OUT"
