# Everything a fresh machine needs comes from here: the venv, the pinned toolchain, the checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
SPOTPOOL := $(VENV)/bin/spotpool
# The tools the tests and the demo run; `make toolchain` installs every tool of the manifest.
RUN_TOOLS := pulumi pulumi-language-python pulumi-resource-tencentcloud pulumi-resource-kubernetes
RUN_TOOLS += etcd kube-apiserver kube-controller-manager kubectl versitygw helm
# Source folders of the tools whose modules the Go module proxy refuses (the language host,
# the kubernetes plugin): the last source tried. A fresh clone has shared/ beside it.
HERE := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
SPOTPOOL_LOCAL_SOURCE ?= $(abspath $(HERE)../shared/upstream)
LOCAL_SOURCE_FLAG := $(if $(wildcard $(SPOTPOOL_LOCAL_SOURCE)),--local-source $(SPOTPOOL_LOCAL_SOURCE))

.PHONY: venv toolchain run-tools lint test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

toolchain: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG)

run-tools: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG) $(RUN_TOOLS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: run-tools lint
	$(VENV)/bin/pytest

demo: run-tools
	$(SPOTPOOL) demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
