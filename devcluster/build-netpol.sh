#!/usr/bin/env bash
# Build (or reuse) the dev cluster's NetworkPolicy engine: SIG Network's reference implementation,
# kube-network-policies, from its Go module (devcluster/netpol.py says why this engine and how it
# runs here). About 3 minutes cold on 2 cores. Prints the tool directory on the last line of stdout.
set -euo pipefail
VERSION=${KUBE_NETWORK_POLICIES_VERSION:-0.8.0}
exec bash "$(dirname "${BASH_SOURCE[0]}")/build-go-module.sh" kube-network-policies \
  sigs.k8s.io/kube-network-policies "$VERSION" ./cmd netpol 3
