#!/usr/bin/env bash
# Build (or reuse) the local control plane's binaries from Go modules.
#
# Why from Go modules: this project's machines have no Docker engine and cannot download
# release binaries, but they do reach the Go module proxy. Everything lands in
# ~/.cache/dpjob/<versions>/bin so that a second run (and CI on the same machine) takes seconds.
# Prints the bin directory on the last line of stdout.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
HELM_VERSION=${HELM_VERSION:-3.21.4}

CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
BIN="$CACHE_ROOT/$KEY/bin"
WORK="$CACHE_ROOT/$KEY/build"
mkdir -p "$BIN" "$WORK"

export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-local}
log() { echo "[build] $*" >&2; }
have() { [ -x "$BIN/$1" ]; }
MINOR=${K8S_VERSION#1.}; MINOR=${MINOR%%.*}
BUILD_DATE=$(date -u +%FT%TZ)

build_k8s() {
  local targets=(kube-apiserver kube-controller-manager kube-scheduler kubectl) missing=()
  for t in "${targets[@]}"; do have "$t" || missing+=("$t"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "building Kubernetes v$K8S_VERSION: ${missing[*]} (cold: tens of minutes on 2 cores)"
  local dir="$WORK/k8s"; mkdir -p "$dir"; cd "$dir"
  if [ ! -f go.mod ]; then
    go mod init local/k8sbuild >/dev/null 2>&1
    local gomod
    gomod=$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" | python3 -c 'import json,sys;print(json.load(sys.stdin)["GoMod"])')
    # k8s.io/kubernetes maps its staging repos with local replaces that a dependent module ignores:
    # pin each one to its published v0.<minor>.<patch> tag instead (kubernetes#79384).
    awk -v s="v0.${K8S_VERSION#1.}" '$1 ~ /^k8s\.io\// && $2=="v0.0.0" {print "replace "$1" => "$1" "s}' "$gomod" >> go.mod
    grep '^godebug' "$gomod" >> go.mod || true
    go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S_VERSION" \
      "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION"
  fi
  # The version ldflags are what hack/lib/version.sh sets: kwok, helm and kubectl read them.
  local ld="-s -w" p pkgs=()
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$MINOR -X $p.gitTreeState=clean -X $p.buildDate=$BUILD_DATE"
  done
  for t in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
  go build -mod=mod -p 2 -ldflags "$ld" -o "$BIN/" "${pkgs[@]}"
}

build_etcd() {
  have etcd && return 0
  log "building etcd v$ETCD_VERSION"
  local dir="$WORK/etcd"; mkdir -p "$dir"; cd "$dir"
  # A module of its own so etcd's grpc/otel versions cannot move Kubernetes' dependencies.
  [ -f go.mod ] || { go mod init local/etcdbuild >/dev/null 2>&1; go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"; }
  go build -mod=mod -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
}

build_kwok() {
  have kwok && return 0
  log "building kwok v$KWOK_VERSION"
  GOBIN="$BIN" go install -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
}

build_helm() {
  have helm && return 0
  log "building helm v$HELM_VERSION"
  GOBIN="$BIN" go install -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
}

stage_dir() {
  # kwok's bundled stage manifests ship in its module zip; the cluster script reads them from here.
  local src
  src=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION/kustomize/stage
  [ -d "$src" ] || (cd "$WORK" && go mod download "sigs.k8s.io/kwok@v$KWOK_VERSION")
  mkdir -p "$CACHE_ROOT/$KEY/kwok-stage"
  cp -r "$src/." "$CACHE_ROOT/$KEY/kwok-stage/" 2>/dev/null || true
  chmod -R u+w "$CACHE_ROOT/$KEY/kwok-stage"
}

start=$(date +%s)
build_etcd; build_kwok; build_helm; build_k8s
[ -d "$CACHE_ROOT/$KEY/kwok-stage/pod" ] || stage_dir
log "binaries ready in $(( $(date +%s) - start ))s: $BIN"
echo "$BIN"
