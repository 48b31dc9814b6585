#!/usr/bin/env bash
# Build (or reuse) the dev cluster's binaries from Go modules: the control plane and a real node
# (kube-apiserver, controller-manager, scheduler, kubelet, kube-proxy, kubectl), etcd, kwok, helm,
# CoreDNS, Prometheus 3, the Prometheus Operator and the OCI registry (CNCF distribution).
#
# Why from Go modules: this project's machines have no Docker engine and cannot download
# release binaries, but they do reach the Go module proxy. Everything lands in
# ~/.cache/dpjob/<versions>/bin so that a second run (and CI on the same machine) takes seconds.
# A cold build prints one line per component with its elapsed time and an estimate; the full Go
# output goes to ~/.cache/dpjob/logs/build-<component>.log.
# Prints the bin directory on the last line of stdout.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-1.36.3}
ETCD_VERSION=${ETCD_VERSION:-3.6.16}
KWOK_VERSION=${KWOK_VERSION:-0.8.0}
HELM_VERSION=${HELM_VERSION:-3.21.4}
COREDNS_VERSION=${COREDNS_VERSION:-1.15.0}
# Prometheus 3.x is published as the Go module version v0.3<minor>.<patch>.
PROMETHEUS_MODULE_VERSION=${PROMETHEUS_MODULE_VERSION:-0.316.0}
PROMETHEUS_OPERATOR_VERSION=${PROMETHEUS_OPERATOR_VERSION:-0.85.0}
REGISTRY_VERSION=${REGISTRY_VERSION:-3.1.2}

CACHE_ROOT=${DPJOB_CACHE:-$HOME/.cache/dpjob}
KEY="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}"
BIN="$CACHE_ROOT/$KEY/bin"
WORK="$CACHE_ROOT/$KEY/build"
TOOLS="$CACHE_ROOT/tools"
BUILD_LOGS="$CACHE_ROOT/logs"
mkdir -p "$BIN" "$WORK" "$TOOLS" "$BUILD_LOGS"
# Everything of these versions was built and linked: no lock to wait for (a Kueue or training-
# operator build may hold it for minutes), nothing to check.
COMPLETE="$BIN/.complete-$(echo "$KEY $COREDNS_VERSION $PROMETHEUS_MODULE_VERSION $PROMETHEUS_OPERATOR_VERSION $REGISTRY_VERSION" \
  | sha256sum | cut -c1-12)"
if [ -f "$COMPLETE" ]; then
  echo "$BIN"
  exit 0
fi
# One build at a time per machine: `make dev`, a test that needs helm and a CI clone may all ask.
exec 9>"$CACHE_ROOT/.build.lock"
if ! flock -n 9; then
  echo "[build] another build is running (e.g. make dev in another checkout); waiting for it" >&2
  flock 9
fi

export CGO_ENABLED=0 GOFLAGS=-trimpath GOTOOLCHAIN=${GOTOOLCHAIN:-local}
log() { echo "[build] $*" >&2; }
have() { [ -x "$BIN/$1" ]; }
GO=$(bash "$(dirname "${BASH_SOURCE[0]}")/go.sh" | tail -1) || exit 1
export PATH="$(dirname "$GO"):$PATH"

# step NAME MINUTES FUNCTION: run FUNCTION with its output in a log file, and say every minute how
# long it has taken against the usual cold time on 2 cores. One clear line if it fails.
STEP=0
STEPS_TOTAL=0
step() {
  local name=$1 usual=$2 fn=$3 logfile="$BUILD_LOGS/build-$1.log" t0=$SECONDS ticker
  STEP=$((STEP + 1))
  log "$name ($STEP/$STEPS_TOTAL): building from Go modules, usually ~${usual} min cold on 2 cores (log: $logfile)"
  ( while sleep 60; do
      local m=$(( (SECONDS - t0) / 60 )); local left=$(( usual - m ))
      if [ $left -gt 0 ]; then log "  $name: ${m} min so far, about ${left} min left"; else log "  $name: ${m} min so far, nearly done"; fi
    done ) &
  ticker=$!
  ( "$fn" ) >"$logfile" 2>&1 &  # in the background so that `set -e` holds inside it
  if ! wait $!; then
    kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
    tail -n 20 "$logfile" >&2
    log "building $name failed after $((SECONDS - t0))s: see $logfile (a network error: re-run; disk full: free space under $CACHE_ROOT)"
    exit 1
  fi
  kill "$ticker" 2>/dev/null; wait "$ticker" 2>/dev/null || true
  log "$name: done in $((SECONDS - t0))s"
}
MINOR=${K8S_VERSION#1.}; MINOR=${MINOR%%.*}
BUILD_DATE=$(date -u +%FT%TZ)

K8S_TARGETS=(kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy)
k8s_missing() { local t; for t in "${K8S_TARGETS[@]}"; do have "$t" || echo "$t"; done; }
build_k8s() {
  local missing=()
  mapfile -t missing < <(k8s_missing)
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
      "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S_VERSION" "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION" \
      "k8s.io/kubernetes/cmd/kubelet@v$K8S_VERSION" "k8s.io/kubernetes/cmd/kube-proxy@v$K8S_VERSION"
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
  local dir="$WORK/etcd"; mkdir -p "$dir"; cd "$dir"
  # A module of its own so etcd's grpc/otel versions cannot move Kubernetes' dependencies.
  [ -f go.mod ] || { go mod init local/etcdbuild >/dev/null 2>&1; go get -tool "go.etcd.io/etcd/server/v3@v$ETCD_VERSION"; }
  go build -mod=mod -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3
}

# kwok is built from a copy of its module with devcluster/patches/kwok-<version>-*.patch applied
# (why, in each patch's header); the patches' checksum is kept next to the binary, so a changed
# patch rebuilds kwok alone.
PATCHES="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/patches"
kwok_patches_sum() { cat "$PATCHES"/kwok-"$KWOK_VERSION"-*.patch 2>/dev/null | sha256sum | cut -c1-16; }
kwok_current() { have kwok && [ "$(cat "$BIN/kwok.patches" 2>/dev/null)" = "$(kwok_patches_sum)" ]; }
build_kwok() {
  local src dir="$WORK/kwok-src" p
  src=$(go env GOMODCACHE)/sigs.k8s.io/kwok@v$KWOK_VERSION
  [ -d "$src" ] || (cd "$WORK" && go mod download "sigs.k8s.io/kwok@v$KWOK_VERSION")
  rm -rf "$dir"; cp -r "$src" "$dir"; chmod -R u+w "$dir"; cd "$dir"
  for p in "$PATCHES"/kwok-"$KWOK_VERSION"-*.patch; do
    [ -e "$p" ] || continue
    echo "applying $p"; git apply "$p"
  done
  go build -mod=mod -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION" -o "$BIN/kwok" ./cmd/kwok
  kwok_patches_sum >"$BIN/kwok.patches"
}

build_helm() {
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

build_coredns() {
  # CoreDNS' module root is its main package; a wrapper module like the others keeps go install's
  # "no replace directives" rule out of the way.
  local dir="$WORK/coredns-$COREDNS_VERSION" out="$TOOLS/coredns-$COREDNS_VERSION"
  mkdir -p "$dir" "$out"; cd "$dir"
  [ -f go.mod ] || { go mod init local/corednsbuild; go get -tool "github.com/coredns/coredns@v$COREDNS_VERSION"; }
  go build -mod=mod -p 2 -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=v$COREDNS_VERSION" \
    -o "$out/coredns" github.com/coredns/coredns
}

build_prometheus() {
  # Prometheus 3 with Kubernetes service discovery only (its build tags): the other discoveries
  # pull modules the proxy may not serve (Nomad's API: "This module version is not available").
  # The web UI's assets are not embedded (building them needs the UI's npm workspace); the HTTP
  # API, which tests and `make dev` use, is.
  local v=$PROMETHEUS_MODULE_VERSION dir="$WORK/prometheus-$PROMETHEUS_MODULE_VERSION"
  local out="$TOOLS/prometheus-$PROMETHEUS_MODULE_VERSION" minor=${PROMETHEUS_MODULE_VERSION#0.3}
  local human="3.$((10#${minor%%.*})).${PROMETHEUS_MODULE_VERSION##*.}"
  mkdir -p "$dir" "$out"; cd "$dir"
  local tags=remove_all_sd,enable_kubernetes_sd
  [ -f go.mod ] || go mod init local/prombuild
  grep -q prometheus/prometheus go.mod || go get -tags "$tags" -tool "github.com/prometheus/prometheus/cmd/prometheus@v$v"
  local p=github.com/prometheus/common/version
  go build -mod=mod -p 2 -tags "$tags" -ldflags "-s -w -X $p.Version=$human -X $p.Branch=release -X $p.Revision=v$v" \
    -o "$out/prometheus" github.com/prometheus/prometheus/cmd/prometheus
}

build_prometheus_operator() {
  # The Prometheus Operator (kube-prometheus-stack's core) and its config reloader, plus its CRDs,
  # which ship in the module. Its go.mod replaces two sub-modules with local paths; the wrapper
  # module takes their published versions instead.
  local v=$PROMETHEUS_OPERATOR_VERSION m=github.com/prometheus-operator/prometheus-operator
  local dir="$WORK/prometheus-operator-$v" out="$TOOLS/prometheus-operator-$v"
  mkdir -p "$dir" "$out"; cd "$dir"
  [ -f go.mod ] || go mod init local/promopbuild
  grep -q "$m " go.mod || go get -tool "$m/cmd/operator@v$v" "$m/cmd/prometheus-config-reloader@v$v"
  go build -mod=mod -p 2 -ldflags "-s -w -X github.com/prometheus/common/version.Version=$v" \
    -o "$out/" "$m/cmd/operator" "$m/cmd/prometheus-config-reloader"
  local src
  src=$(go mod download -json "$m@v$v" | python3 -c 'import json,sys;print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out/crds" "$out/rbac"
  cp -r "$src/example/prometheus-operator-crd" "$out/crds"
  cp -r "$src/example/rbac" "$out/rbac"  # the upstream Deployment, ServiceAccounts and RBAC
  chmod -R u+w "$out/crds" "$out/rbac"
}

build_registry() {
  # CNCF distribution's registry: the dev cluster's nodes pull every image from it (registry.py).
  GOBIN="$TOOLS/registry-$REGISTRY_VERSION" go install -ldflags "-s -w" \
    "github.com/distribution/distribution/v3/cmd/registry@v$REGISTRY_VERSION"
}

link_tool() {  # tools of their own version live outside the k8s-keyed bin directory: DIR BINARY [LINK]
  ln -sfn "$TOOLS/$1/$2" "$BIN/${3:-$2}"
}

start=$(date +%s)
todo=()
have etcd || todo+=("etcd 2 build_etcd")
kwok_current || todo+=("kwok 4 build_kwok")
have helm || todo+=("helm 3 build_helm")
[ -x "$TOOLS/coredns-$COREDNS_VERSION/coredns" ] || todo+=("coredns 3 build_coredns")
[ -x "$TOOLS/prometheus-$PROMETHEUS_MODULE_VERSION/prometheus" ] || todo+=("prometheus 4 build_prometheus")
[ -d "$TOOLS/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION/rbac" ] || \
  todo+=("prometheus-operator 6 build_prometheus_operator")
[ -x "$TOOLS/registry-$REGISTRY_VERSION/registry" ] || todo+=("registry 2 build_registry")
[ -z "$(k8s_missing)" ] || todo+=("kubernetes 8 build_k8s")
STEPS_TOTAL=${#todo[@]}
[ $STEPS_TOTAL -eq 0 ] || log "building $STEPS_TOTAL component(s) from Go modules into $CACHE_ROOT (first run only)"
for t in "${todo[@]}"; do
  # shellcheck disable=SC2086
  step $t
done
link_tool "coredns-$COREDNS_VERSION" coredns
link_tool "prometheus-$PROMETHEUS_MODULE_VERSION" prometheus
link_tool "prometheus-operator-$PROMETHEUS_OPERATOR_VERSION" operator prometheus-operator
link_tool "prometheus-operator-$PROMETHEUS_OPERATOR_VERSION" prometheus-config-reloader
link_tool "registry-$REGISTRY_VERSION" registry
[ -d "$CACHE_ROOT/$KEY/kwok-stage/pod" ] || stage_dir >>"$BUILD_LOGS/build-kwok.log" 2>&1
[ $STEPS_TOTAL -eq 0 ] || log "binaries ready in $(( $(date +%s) - start ))s: $BIN"
touch "$COMPLETE"
echo "$BIN"
