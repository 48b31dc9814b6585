#!/usr/bin/env bash
# Install the Debian packages the dev cluster needs, only those that are missing.
#
# Why a script: a fresh machine has none of them, and `make dev`/`make test` promise to install
# what they need on first use. Every package the project calls by path is named here, grouped by
# the step that needs it; the steps call `sysdeps.sh GROUP...` before they start.
#
#   node    a real node: containerd, runc, CNI plugins, iptables and conntrack (kube-proxy)
#   images  OCI images without a Docker daemon: buildah, mmdebstrap (the base root filesystem)
#   tools   openssl (cluster certificates), iproute2
#   go      golang-go, only when the machine has no Go at all (devcluster/go.sh fetches the version
#           the build needs with it)
#
# Prints one line per package it installs; fails with one line that names the fix.
set -euo pipefail

declare -A GROUPS_PKGS=(
  [node]="containerd runc containernetworking-plugins iptables conntrack"
  [images]="buildah mmdebstrap"
  [tools]="openssl iproute2"
  [go]="golang-go"
)

# Everything at once, for the messages below (and for a machine set up by hand):
BY_HAND="apt-get install -y containerd runc containernetworking-plugins iptables conntrack buildah mmdebstrap openssl iproute2"
log() { echo "[sysdeps] $*" >&2; }
installed() { [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = "installed" ]; }

want=()
for group in "${@:-node images tools}"; do
  for g in $group; do
    [ -n "${GROUPS_PKGS[$g]:-}" ] || { log "unknown group '$g' (known: ${!GROUPS_PKGS[*]})"; exit 2; }
    for p in ${GROUPS_PKGS[$g]}; do installed "$p" || want+=("$p"); done
  done
done
[ ${#want[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
  log "missing Debian packages: ${want[*]}; this machine has no apt-get: install the equivalents of: $BY_HAND"
  exit 1
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && SUDO="sudo -n" || {
    log "missing Debian packages: ${want[*]}; run: sudo apt-get install -y ${want[*]}"; exit 1; }
fi
LOG=${DPJOB_CACHE:-$HOME/.cache/dpjob}/logs/apt.log
mkdir -p "$(dirname "$LOG")"
start=$(date +%s)
log "installing ${want[*]} (apt-get; log: $LOG)"
# An apt list older than a day may name versions the mirror no longer has.
if [ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -mmin -1440 2>/dev/null | head -1)" ]; then
  $SUDO apt-get update -qq >>"$LOG" 2>&1 || { log "apt-get update failed (see $LOG); check the network or the apt sources"; exit 1; }
fi
if ! $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${want[@]}" >>"$LOG" 2>&1; then
  log "apt-get install ${want[*]} failed: see $LOG; run: sudo apt-get install -y ${want[*]}"
  exit 1
fi
log "installed ${want[*]} in $(( $(date +%s) - start ))s"
