# msop — every target does its own setup: a fresh checkout needs only Python 3.11+ and Go.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
CACHE  := .cache
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
PYTEST_ARGS ?=

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -e '.[dev]'
	@rm -f $(VENV)/.installed-*; touch $@

.PHONY: venv
venv: $(STAMP) ## create .venv with msop and the dev tools

.PHONY: cluster-bin
cluster-bin: ## build (or reuse) the control-plane binaries from hack/cluster
	@hack/cluster/build.sh

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
generate: venv ## regenerate the CRD from the Kubernetes OpenAPI schema (hack/gen_crd.py)
	$(BIN)/python hack/gen_crd.py

.PHONY: lint
lint: venv ## ruff (lint + format check) and mypy --strict
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict msop

.PHONY: fmt
fmt: venv ## apply ruff's formatting and autofixes
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

.PHONY: unit
unit: venv ## pure unit tests (no cluster)
	$(BIN)/pytest -q tests/unit $(PYTEST_ARGS)

.PHONY: e2e
e2e: venv ## end-to-end tests on the local control plane (built if needed)
	@hack/cluster/build.sh >/dev/null
	$(BIN)/pytest -q tests/e2e $(PYTEST_ARGS)

.PHONY: test
test: lint unit e2e ## everything CI runs: lint, unit and e2e tests

.PHONY: demo
demo: venv ## run a sample MSJob to completion on the local cluster
	@echo "make demo: not yet implemented (lands with the packaging issue)"
