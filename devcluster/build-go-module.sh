#!/usr/bin/env bash
# Build (or reuse) one command of a Go module from the Go module proxy, the way devcluster/build.sh
# builds the control plane, cached under ~/.cache/dpjob/tools/<name>-<version>/ so a second run
# takes a second. The module's own go.mod and go.sum pin every dependency: building in a writable
# copy of the module is exactly `go build ./<package>` in a clone of its tag.
#
#   build-go-module.sh NAME MODULE VERSION PACKAGE BINARY [MINUTES [FROM=TO ...]]
#     e.g. build-go-module.sh kube-network-policies sigs.k8s.io/kube-network-policies 0.8.0 ./cmd netpol 3
#
# The binary lands at ~/.cache/dpjob/tools/NAME-VERSION/BINARY, and each FROM (a path inside the
# module: a chart, CRDs) is copied beside it as TO. GO_LDFLAGS adds linker flags (a version stamp).
# The full Go output goes to ~/.cache/dpjob/logs/build-NAME.log. Prints the tool directory on the
# last line of stdout.
set -euo pipefail
if [ $# -lt 5 ]; then
  echo "usage: build-go-module.sh NAME MODULE VERSION PACKAGE BINARY [MINUTES]" >&2
  exit 2
fi
NAME=$1 MODULE=$2 VERSION=$3 PACKAGE=$4 BINARY=$5 MINUTES=${6:-5}
COPIES=("${@:7}")
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
OUT="$CACHE_ROOT/tools/$NAME-$VERSION"
LOGS="$CACHE_ROOT/logs"
log() { echo "[$NAME] $*" >&2; }

built() {
  local copy
  [ -x "$OUT/$BINARY" ] || return 1
  for copy in "${COPIES[@]}"; do [ -e "$OUT/${copy#*=}" ] || return 1; done
}

if built; then
  echo "$OUT"
  exit 0
fi
GO=$(bash "$(dirname "${BASH_SOURCE[0]}")/go.sh" | tail -1) || exit 1
export PATH="$(dirname "$GO"):$PATH"
mkdir -p "$CACHE_ROOT/tools" "$LOGS"
exec 9>"$CACHE_ROOT/.build.lock"  # one Go build at a time per machine (shared with build.sh)
if ! flock -n 9; then log "another build is running; waiting for it"; flock 9; fi
if built; then echo "$OUT"; exit 0; fi
export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-local}

build() {
  set -euo pipefail
  local src stage
  src=$(cd "$CACHE_ROOT" && go mod download -json "$MODULE@v$VERSION" \
        | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  # The module cache is read-only: build in a writable copy (-mod=mod may rewrite go.sum).
  stage="$CACHE_ROOT/tools/.$NAME-$VERSION-src"
  rm -rf "$stage" && mkdir -p "$stage" && cp -r "$src/." "$stage/" && chmod -R u+w "$stage"
  (cd "$stage" && go build -mod=mod -p 2 -ldflags "-s -w ${GO_LDFLAGS:-}" -o "$OUT.tmp/$BINARY" "$PACKAGE")
  local copy
  for copy in "${COPIES[@]}"; do
    cp -r "$src/${copy%%=*}" "$OUT.tmp/${copy#*=}" && chmod -R u+w "$OUT.tmp/${copy#*=}"
  done
  rm -rf "$stage"
}

log "$NAME v$VERSION: building from Go modules, usually ~$MINUTES min cold on 2 cores (log: $LOGS/build-$NAME.log)"
t0=$SECONDS
rm -rf "$OUT.tmp" && mkdir -p "$OUT.tmp"
if ! build >"$LOGS/build-$NAME.log" 2>&1; then
  tail -n 20 "$LOGS/build-$NAME.log" >&2
  log "building $NAME failed after $((SECONDS - t0))s: see $LOGS/build-$NAME.log (a network error: re-run)"
  exit 1
fi
rm -rf "$OUT" && mv "$OUT.tmp" "$OUT"
log "$NAME: done in $((SECONDS - t0))s"
echo "$OUT"
