# Flowline developer commands. `make run` and `make test` are the two that matter.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

CARGO ?= cargo
BIN_DIR := $(CURDIR)/.flowline/bin
export PATH := $(BIN_DIR):$(PATH)

# The cluster every command talks to: the local control plane unless the user
# points us at their own (FLOWLINE_USE_EXISTING_CLUSTER=1 with KUBECONFIG).
ifeq ($(FLOWLINE_USE_EXISTING_CLUSTER),1)
CLUSTER_KUBECONFIG := $(KUBECONFIG)
else
CLUSTER_KUBECONFIG := $(CURDIR)/.flowline/kubeconfig
endif

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

# The step image `make images` imported into the real node (none with kwok alone or
# an existing cluster: then the operator's default applies).
STEP_IMAGE_FLAG = $(if $(wildcard .flowline/cluster/step-image),--step-image $$(cat .flowline/cluster/step-image))

.PHONY: run
run: build cluster images install-crds ## Local control plane + CRDs + admin key + operator with the API on 127.0.0.1:8080
	@KUBECONFIG=$(CLUSTER_KUBECONFIG) ./target/debug/flowline api-key create --namespace default \
	  --name admin --scopes admin --out .flowline/admin-key --reuse
	KUBECONFIG=$(CLUSTER_KUBECONFIG) ./target/debug/flowline operator --listen 127.0.0.1:8080 \
	  $(STEP_IMAGE_FLAG)

.PHONY: test
test: lint unit-test cluster-test ## fmt, clippy, unit tests, then cluster tests against a real control plane

.PHONY: build
build: ## Build the flowline binary
	$(CARGO) build

.PHONY: lint
lint: ## cargo fmt --check and clippy with warnings denied
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@# The core crate stays pure: no Kubernetes client, async runtime or HTTP stack.
	@! $(CARGO) tree -p flowline-core -e normal --prefix none | grep -E '^(kube-client|tokio|hyper|reqwest|axum) ' \
	  || { echo "flowline-core must not depend on a client, runtime or HTTP crate (above)"; exit 1; }

.PHONY: unit-test
unit-test: ## Tests that need no cluster
	$(CARGO) test --workspace
	python3 -m unittest hack/test_bench_report.py

.PHONY: cluster-test
cluster-test: build cluster images install-crds python-deps ## Tests against the control plane (fails, never skips, without one)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) FLOWLINE_REQUIRE_CLUSTER=1 \
	  $(CARGO) test -- --ignored --test-threads 3
	$(MAKE) --no-print-directory fuzz-api
	$(MAKE) --no-print-directory client-test
	$(MAKE) --no-print-directory console-test
	$(MAKE) --no-print-directory chart-test

# `make chaos` sizes (FLOWLINE_CHAOS_* in tests/cluster/chaos/settings.rs); SEED empty
# means a fresh one (printed, so a failure can be rerun with it). A release build: a
# debug operator catching up on hundreds of runs misses its lease renewals here.
RUNS ?= 500
KILLS ?= 10
SEED ?=
MAX_DUP ?= 0.05

.PHONY: chaos
chaos: cluster install-crds ## Crash-proof acceptance: RUNS runs, KILLS operator SIGKILLs (SEED, MAX_DUP); prints the figures
	KUBECONFIG=$(CLUSTER_KUBECONFIG) FLOWLINE_REQUIRE_CLUSTER=1 \
	  FLOWLINE_CHAOS_RUNS=$(RUNS) FLOWLINE_CHAOS_KILLS=$(KILLS) FLOWLINE_CHAOS_MAX_DUP=$(MAX_DUP) \
	  $(if $(SEED),FLOWLINE_CHAOS_SEED=$(SEED)) \
	  $(CARGO) test --release --test cluster -- --ignored --exact --nocapture \
	  chaos::a_killed_operator_is_invisible_to_users

.PHONY: soak
soak: build cluster install-crds ## Operator and an API replica under steady mixed load for SOAK_MINUTES (30): RSS, fds, threads, p99, writes per run over time; goals checked
	KUBECONFIG=$(CLUSTER_KUBECONFIG) SOAK_MINUTES=$(or $(SOAK_MINUTES),30) python3 hack/soak.py

.PHONY: python-deps
python-deps: ## schemathesis, the standardwebhooks verifier, openapi-spec-validator, openapi-python-client and selenium in .flowline/venv (from PyPI)
	hack/python-deps.sh

.PHONY: fuzz-api
fuzz-api: build ## schemathesis against the served OpenAPI document (FUZZ_EXAMPLES per operation)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/fuzz-api.sh

.PHONY: client-test
client-test: build ## Validate and lint /v1/openapi.json (redocly, spectral) and drive clients generated from it (Python, TypeScript, Go) through a session
	KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/client-test.sh

.PHONY: console-test
console-test: build cluster install-crds ## The web console in headless Chromium (selenium) against a real operator; screenshots in .flowline/console-test/
	KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/console-test.sh

.PHONY: bench
bench: cluster install-crds ## Every bench, three runs each (BENCH_RUNS), one table: figure, reference, ratio, goal, met
	python3 hack/bench_report.py run --runs $(or $(BENCH_RUNS),3) $(if $(BENCH_ONLY),--only $(BENCH_ONLY))

.PHONY: bench-api
bench-api: cluster install-crds ## /v1 reads (watch caches) vs the same reads from kube-apiserver
	KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/bench-api.sh

.PHONY: bench-engine
bench-engine: cluster install-crds ## Run engine: step overhead, runs/s and writes per run, job overhead, queue drain, parked runs, a long queue's idle cost
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) bench --bench engine

.PHONY: bench-delivery
bench-delivery: cluster install-crds ## Webhook delivery: 50k events to a local HTTPS sink vs a raw hyper client (bare and signed) and the worker's sender alone, writes per 1,000
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) bench --bench delivery

# bench-scale sizes (see benches/scale.rs): the issue's 10k workflows and 100k runs by
# default; smaller ones for a quick look, e.g. make bench-scale SCALE_RUNS=10000.
SCALE_WORKFLOWS ?= 10000
SCALE_RUNS ?= 100000

.PHONY: bench-scale
bench-scale: cluster install-crds ## Many workflows and finished runs: API memory and cold start, /v1 vs apiserver reads, controller start-up, etcd bytes per run
	$(CARGO) build --release --quiet
	KUBECONFIG=$(CLUSTER_KUBECONFIG) FLOWLINE_SCALE_WORKFLOWS=$(SCALE_WORKFLOWS) FLOWLINE_SCALE_RUNS=$(SCALE_RUNS) \
	  $(CARGO) bench --bench scale

.PHONY: bench-shards
bench-shards: cluster install-crds ## Sharded execution: P5 with 1, 2 and 3 operator replicas (runs/s, writes per run, runs executed twice), a replica killed mid-bench
	$(CARGO) build --release --quiet
	KUBECONFIG=$(CLUSTER_KUBECONFIG) $(CARGO) bench --bench shards

.PHONY: crds
crds: ## Regenerate crds/ from the Rust types
	$(CARGO) run --quiet -- crdgen > crds/flowline.yaml

.PHONY: reference
reference: ## Regenerate docs/reference/workflow.md (from the CRD schema and the template and expression engines) and docs/reference/openapi.json (the served /v1 document); a unit test fails while either is stale
	FLOWLINE_WRITE_REFERENCE=1 $(CARGO) test --quiet -p flowline-core --lib -- --exact reference::tests::reference_is_up_to_date
	FLOWLINE_WRITE_REFERENCE=1 $(CARGO) test --quiet -p flowline-api --lib -- --exact openapi::tests::the_committed_document_is_up_to_date

.PHONY: install-crds
install-crds: ## Apply crds/ to the cluster (server-side) and wait until Established
	kubectl --kubeconfig $(CLUSTER_KUBECONFIG) apply --server-side --force-conflicts -f crds/ >/dev/null
	kubectl --kubeconfig $(CLUSTER_KUBECONFIG) wait --for condition=Established --timeout 60s \
	  crd/workflows.flowline.io crd/runs.flowline.io crd/webhooks.flowline.io \
	  crd/flowlineevents.flowline.io crd/apikeys.flowline.io >/dev/null

.PHONY: chart-crds
chart-crds: ## Copy crds/ into the Helm chart (run after make crds; chart-test fails while they differ)
	cp crds/flowline.yaml charts/flowline/crds/flowline.yaml

.PHONY: chart-docs
chart-docs: ## Regenerate charts/flowline/README.md from values.yaml's `# --` comments (helm-docs, built once; chart-test fails while it is stale)
	hack/helm-docs.sh

.PHONY: chart-test
chart-test: cluster install-crds ## Helm chart and examples/ against the control plane (hack/test-chart.sh; needs a built binary)
	KUBECONFIG=$(CLUSTER_KUBECONFIG) hack/test-chart.sh

.PHONY: cluster
cluster: ## Start the local cluster (idempotent): control plane, a real node (FLOWLINE_REAL_NODE=0: none), kwok; docs/local-cluster.md
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster, delete its data and put the host back as it was
	hack/cluster.sh down

.PHONY: images
images: ## Build the real node's images (pause, toolbox, the step image from target/debug/flowline) and import them
	hack/images.sh

.PHONY: k8s-binaries
k8s-binaries: ## Build or locate etcd, kube-*, kubectl, helm and kwok (cached by version; helm-docs: hack/helm-docs.sh)
	hack/k8s/build.sh
