#!/usr/bin/env bash
# Build (or reuse) Kueue from its Go module (sigs.k8s.io/kueue): the controller binary (`/manager` in
# Kueue's own image) and the module's Helm chart (charts/kueue), cached under
# ~/.cache/dpjob/tools/kueue-<version>/ (devcluster/build-go-module.sh). A cold build is about
# 4 minutes on 2 cores. Prints the tool directory on the last line of stdout.
set -euo pipefail
VERSION=${KUEUE_VERSION:-0.17.0}
GO_LDFLAGS="-X sigs.k8s.io/kueue/pkg/version.GitVersion=v$VERSION" \
  exec bash "$(dirname "${BASH_SOURCE[0]}")/build-go-module.sh" kueue sigs.k8s.io/kueue "$VERSION" \
  ./cmd/kueue manager 4 charts/kueue=chart
