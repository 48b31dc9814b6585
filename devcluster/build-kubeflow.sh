#!/usr/bin/env bash
# Build (or reuse) the real peer for bench/compare.py: Kubeflow's training-operator (PyTorchJob),
# from its Go module, with the module's CRDs, cached under
# ~/.cache/dpjob/tools/training-operator-<version>/ (devcluster/build-go-module.sh). A cold build
# is about 9 minutes on 2 cores. Prints the tool directory on the last line of stdout.
set -euo pipefail
VERSION=${KUBEFLOW_TRAINING_OPERATOR_VERSION:-1.8.1}
exec bash "$(dirname "${BASH_SOURCE[0]}")/build-go-module.sh" training-operator \
  github.com/kubeflow/training-operator "$VERSION" ./cmd/training-operator.v1 training-operator 9 \
  manifests/base/crds=crds
