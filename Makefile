# Everything a fresh machine needs comes from here: the venv, the pinned toolchain, the checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
SPOTPOOL := $(VENV)/bin/spotpool
# The tools the tests and the demo run today. The Pulumi CLI, its Python language host and
# the tencentcloud/kubernetes resource plugins are in `make toolchain` too, but this workplace's
# Go module proxy refuses their modules (see README, "What cannot be built here").
CLUSTER_TOOLS := etcd kube-apiserver kubectl

.PHONY: venv toolchain cluster-tools lint test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

toolchain: venv
	$(SPOTPOOL) toolchain install

cluster-tools: venv
	$(SPOTPOOL) toolchain install $(CLUSTER_TOOLS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: cluster-tools lint
	$(VENV)/bin/pytest

demo: cluster-tools
	$(SPOTPOOL) demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
