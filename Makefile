# Everything a fresh machine needs comes from here: the venv, the pinned toolchain, the checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
SPOTPOOL := $(VENV)/bin/spotpool
# The tools the tests and the demo run. `make toolchain` installs these and the rest: the
# optional Python language host and the kubernetes plugin, whose modules this workplace's Go
# module proxy refuses (see README, "What cannot be built here").
RUN_TOOLS := pulumi pulumi-resource-tencentcloud etcd kube-apiserver kubectl versitygw helm

.PHONY: venv toolchain run-tools lint test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

toolchain: venv
	$(SPOTPOOL) toolchain install

run-tools: venv
	$(SPOTPOOL) toolchain install $(RUN_TOOLS)

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
