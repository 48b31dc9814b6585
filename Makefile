# dpjob developer entry points. `make dev` and `make test` install what they need on first use.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

BIN_DIR = $$(bash devcluster/build.sh | tail -1)
VENV    = $$(bash devcluster/venv.sh | tail -1)
KUBECONFIG_PATH := $(CURDIR)/.devcluster/kubeconfig
PYTEST_ARGS ?=

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-19s %s\n", $$1, $$2}'

venv: ## create or reuse the cached virtual environment
	@bash devcluster/venv.sh >/dev/null

venv-mindspore: ## create or reuse the MindSpore trainer's venv (~/.cache/dpjob/venv-ms-<sha>; ~800 MB download)
	@bash devcluster/venv-mindspore.sh >/dev/null

binaries: ## build or reuse etcd, kube-*, kubelet, kubectl, kwok, helm, CoreDNS, Prometheus and the registry from Go modules
	@bash devcluster/build.sh >/dev/null

kubeflow: ## build or reuse Kubeflow's training-operator v1.8.1 from its Go module (the peer bench/compare.py runs)
	@bash devcluster/build-kubeflow.sh >/dev/null

kueue-binary: ## build or reuse Kueue v0.17's controller and chart from its Go module (the Kueue tests install it)
	@bash devcluster/build-kueue.sh >/dev/null

netpol-binary: ## build or reuse kube-network-policies v0.8.0 from its Go module (the multi-node tests install it)
	@bash devcluster/build-netpol.sh >/dev/null

kueue: cluster-up ## install Kueue v0.17 in the dev cluster (docs/kueue.md), DataParallelJob as an external framework
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) "$$venv/bin/python" devcluster/kueue.py install

netpol: cluster-up ## install the NetworkPolicy engine (kube-network-policies) in the dev cluster (docs/security.md)
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) "$$venv/bin/python" devcluster/netpol.py install

images: ## build every image an example, the chart or `dpjob run` names: operator, trainer (cpu = cuda), trainer (mindspore-cpu)
	@bash devcluster/images.sh operator trainer trainer-mindspore

REGISTRY ?=
push: ## push the images to REGISTRY=host/path (default: the dev cluster's registry, localhost:5000/dpjob)
	@python3 devcluster/publish.py push $(if $(REGISTRY),--registry $(REGISTRY))

release: ## push the images and the chart, VERSION=x.y.z (= pyproject.toml's) REGISTRY=host/path
	@if [ -z "$(VERSION)" ] || [ -z "$(REGISTRY)" ]; then echo "make release: set VERSION=x.y.z and REGISTRY=host/path (e.g. ghcr.io/dpjob)" >&2; exit 2; fi
	@bin=$(BIN_DIR); python3 devcluster/publish.py release --version $(VERSION) --registry $(REGISTRY) --helm "$$bin/helm"

doctor: ## check the machine (OS, root, cores, disk, network) and list every prerequisite, found or missing
	@python3 devcluster/doctor.py

cluster-up: ## start the local cluster: registry, control plane, kwok pools, a real node (idempotent)
	@bash devcluster/sysdeps.sh tools; bin=$(BIN_DIR); venv=$(VENV); python3 devcluster/cluster.py up --bin-dir "$$bin" --python "$$venv/bin/python"

cluster-down: ## stop the local control plane and remove its state
	@python3 devcluster/cluster.py down

cluster-status: ## show which control-plane processes run
	@python3 devcluster/cluster.py status

crds: cluster-up ## install the CRDs into the local cluster
	@.devcluster/bin/kubectl --kubeconfig $(KUBECONFIG_PATH) apply --server-side -f crds/

run: crds ## run the operator against the local cluster (foreground)
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) DPJOB_METRICS_BIND_ADDRESS=127.0.0.1 DPJOB_HEALTH_BIND_ADDRESS=127.0.0.1 \
		DPJOB_METRICS_AUTH=none "$$venv/bin/python" -m dpjob_operator

lint: ## ruff, import-layer contracts, mypy --strict, size limits (no cluster; `make test` runs it first)
	@bash devcluster/lint.sh

# The chart's unit tests render it with the helm that `binaries` builds (with progress, on first use).
test-unit: binaries ## unit tests only (no cluster), one pytest worker per core (pytest-xdist)
	@venv=$(VENV); bash devcluster/pytest.sh "$$venv/bin/python" -m "unit and not mindspore" -n auto $(PYTEST_ARGS)

test-fast: lint test-unit ## the inner loop: lint and the unit tests, no cluster (under a minute once the venv exists)

test-local: binaries ## every test that needs no cluster: the unit tests and the local DDP runs, one pytest worker per core
	@venv=$(VENV); bash devcluster/pytest.sh "$$venv/bin/python" -m "not mindspore and not bench" --cluster-tests none -n auto $(PYTEST_ARGS)

# mindspore 2.10 needs numpy 1.x, so its tests run in their own venv; the main venv skips them
# (CI=true: fails them, naming make venv-mindspore).
test-mindspore: ## the MindSpore backend's tests (unit + msrun e2e) with its own venv; no cluster
	@venv=$$(bash devcluster/venv-mindspore.sh | tail -1); PYTHONPATH=$(CURDIR)/trainer-image:$(CURDIR) \
	  bash devcluster/pytest.sh "$$venv/bin/python" -m mindspore tests/unit/test_trainer_mindspore.py \
	  tests/unit/test_trainer_mindspore_metrics.py \
	  tests/e2e/test_mindspore_local.py $(PYTEST_ARGS)

# lint first: its failures are reported in seconds, before any cluster work. Then the tests on the
# cluster run in two streams at once (they share it), and beside them, in the background at a lower CPU
# priority, every test that needs no cluster: unit tests, local DDP runs, the MindSpore backend's
# (devcluster/test.sh says why and how). The chaos drills run shorter here (a minute of churn with
# a failover in its middle, 2 API-server restarts) than in `make chaos` (5 minutes, 5 restarts).
test: lint cluster-up binaries kubeflow kueue-binary netpol-binary venv-mindspore ## lint, then every test: unit, integration (real control plane), end-to-end, MindSpore
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) DPJOB_CHURN_SECONDS=$${DPJOB_CHURN_SECONDS:-60} \
	  DPJOB_APISERVER_RESTARTS=$${DPJOB_APISERVER_RESTARTS:-2} \
	  bash devcluster/test.sh "$$venv/bin/python" -m "not mindspore and not bench" --cluster-tests only $(PYTEST_ARGS)

test-bench: cluster-up kubeflow ## the benchmarks' own tests: tiny runs of bench/compare.py, the pod-shape benchmark and the GPU check on CPU (~6 min; not in `make test`)
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) bash devcluster/pytest.sh "$$venv/bin/python" -m bench $(PYTEST_ARGS)

chaos: cluster-up ## only the chaos drills (API-server restarts, a 429 storm, two replicas under churn); `make test` runs them last
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) bash devcluster/pytest.sh "$$venv/bin/python" -m chaos tests/chaos $(PYTEST_ARGS)

dev: ## the main job: cluster with a real node, the operator installed with Helm, a real DDP job (see README)
	@bash devcluster/sysdeps.sh tools; venv=$(VENV); bin=$(BIN_DIR); "$$venv/bin/python" devcluster/dev.py --bin-dir "$$bin"

bench: cluster-up ## benchmarks (ratios side by side; results in bench/results/)
	@venv=$(VENV); for b in bench/bench_*.py; do KUBECONFIG=$(KUBECONFIG_PATH) "$$venv/bin/python" $$b; done

dashboard-pictures: ## draw the Grafana dashboards as SVG from a run's Prometheus into docs/images/dashboards/ (`make dev` first; docs/observability.md)
	@venv=$(VENV); "$$venv/bin/python" -m devcluster.dashboard_render.pictures --out docs/images/dashboards $(PICTURES_ARGS)

bench-compare: cluster-up kubeflow ## raw client vs dpjob vs Kubeflow's training-operator, one run (bench/results/compare.md)
	@venv=$(VENV); KUBECONFIG=$(KUBECONFIG_PATH) "$$venv/bin/python" bench/compare.py $(BENCH_ARGS)

gpu-check: ## on a GPU machine: our trainer against a bare PyTorch DDP loop per precision (steps/s, ratios; docs/benchmarks.md)
	@python3 bench/gpu_check.py $(GPU_CHECK_ARGS)

clean: cluster-down ## remove local state (caches under ~/.cache/dpjob are kept)
	@rm -rf .devcluster .pytest_cache .mypy_cache .ruff_cache

.PHONY: help venv venv-mindspore test-mindspore test-fast test-local test-bench binaries kubeflow kueue-binary netpol-binary kueue netpol bench-compare images push release doctor cluster-up cluster-down cluster-status crds run lint test-unit test chaos dev bench dashboard-pictures gpu-check clean
