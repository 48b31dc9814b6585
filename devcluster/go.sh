#!/usr/bin/env bash
# Print the path of a Go that can build the dev cluster (Go >= 1.25: Kubernetes 1.36 needs it),
# installing one first when this machine has none, or only an older one.
#
# Why this way: the dev cluster is built from Go modules, and these machines reach the Go module
# proxy but no download site. A machine with Go >= 1.25 on PATH uses it. Otherwise Debian's
# golang-go (devcluster/sysdeps.sh go; 1.19 on Debian 12) fetches the approved toolchain
# (DPJOB_GO_TOOLCHAIN, go1.27.3) from the proxy as the module golang.org/toolchain, which is what
# `GOTOOLCHAIN=go1.27.3` does on a Go new enough to know that variable, and keeps it in
# ~/.cache/dpjob/go/. Progress on stderr, the path on the last line of stdout.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
MIN_MINOR=25
TOOLCHAIN=${DPJOB_GO_TOOLCHAIN:-go1.27.3}
log() { echo "[go] $*" >&2; }

minor_of() {  # minor_of GO -> 19 for go1.19.8; 0 when it cannot say
  local v
  v=$("$1" env GOVERSION 2>/dev/null || "$1" version 2>/dev/null | awk '{print $3}')
  [[ $v =~ ^go1\.([0-9]+) ]] && echo "${BASH_REMATCH[1]}" || echo 0
}

if command -v go >/dev/null 2>&1 && [ "$(minor_of go)" -ge $MIN_MINOR ]; then
  command -v go
  exit 0
fi
cached="$CACHE_ROOT/go/$TOOLCHAIN/bin/go"
if [ -x "$cached" ]; then
  echo "$cached"
  exit 0
fi
bootstrap=$(command -v go || true)
if [ -z "$bootstrap" ]; then
  log "no Go on this machine: installing Debian's golang-go to fetch $TOOLCHAIN from the Go module proxy"
  bash "$ROOT/devcluster/sysdeps.sh" go
  bootstrap=$(command -v go) || { log "golang-go installed but no go on PATH; add /usr/bin to PATH"; exit 1; }
else
  log "$($bootstrap version | awk '{print $3}') is older than go1.$MIN_MINOR: fetching $TOOLCHAIN from the Go module proxy"
fi
case $(uname -m) in
  x86_64) arch=amd64 ;;
  aarch64) arch=arm64 ;;
  *) log "no Go toolchain for $(uname -m): install Go >= 1.$MIN_MINOR by hand"; exit 1 ;;
esac
mkdir -p "$CACHE_ROOT/go"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
module="golang.org/toolchain@v0.0.1-$TOOLCHAIN.linux-$arch"
if ! dir=$(cd "$work" && GOPATH="$CACHE_ROOT/go/path" GOFLAGS=-modcacherw GO111MODULE=on \
           "$bootstrap" mod download -json "$module" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])'); then
  log "could not fetch $module from the Go module proxy (GOPROXY=$("$bootstrap" env GOPROXY)); check the network"
  exit 1
fi
chmod +x "$dir/bin/"* "$dir/pkg/tool/"*/* 2>/dev/null || true
ln -sfn "$dir" "$CACHE_ROOT/go/$TOOLCHAIN"
"$cached" version >&2
echo "$cached"
