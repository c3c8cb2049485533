# Everything a fresh machine needs comes from here: the venv, the pinned toolchain, the checks.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
SPOTPOOL := $(VENV)/bin/spotpool
# The tools the demo runs (src/spotpool/demo.py checks the same list): the local cluster, kubectl,
# and the Pulumi CLI with the tencentcloud plugin. The engine runs the stack program inline
# (`up --client`), so no language host. `make toolchain` installs every tool of the manifest.
DEMO_TOOLS := pulumi pulumi-resource-tencentcloud etcd kube-apiserver kube-controller-manager kubectl
# The tools the tests run: the demo's, the language host (pulumi typed by hand), the kubernetes
# plugin (the deploy program), versitygw (s3:// backend), helm (the chart), prometheus (dashboard),
# promtool (the chart's alerts).
TEST_TOOLS := $(DEMO_TOOLS) pulumi-language-python pulumi-resource-kubernetes versitygw helm
TEST_TOOLS += prometheus promtool
TEST_TOOLS += kube-scheduler kwok  # the local world's nodes (localworld/nodes.py)
# Source folders of the tools whose modules the Go module proxy refuses (the language host,
# the kubernetes plugin): the last source tried. A fresh clone has shared/ beside it.
HERE := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))
SPOTPOOL_LOCAL_SOURCE ?= $(abspath $(HERE)../shared/upstream)
LOCAL_SOURCE_FLAG := $(if $(wildcard $(SPOTPOOL_LOCAL_SOURCE)),--local-source $(SPOTPOOL_LOCAL_SOURCE))

.PHONY: venv toolchain demo-tools test-tools image lint test demo clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip==25.3
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

toolchain: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG)

demo-tools: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG) $(DEMO_TOOLS)

test-tools: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG) $(TEST_TOOLS)

# The operator image (docs/deploy.md, "Build the image"): the tools it carries, then buildah
# (installed from the distribution's packages when missing); skipped in seconds when an image
# of the same inputs exists.
IMAGE_TOOLS := pulumi pulumi-resource-tencentcloud

image: venv
	$(SPOTPOOL) toolchain install $(LOCAL_SOURCE_FLAG) $(IMAGE_TOOLS)
	$(SPOTPOOL) image build

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports  # the layers (pyproject.toml [tool.importlinter], docs/architecture.md)

# One worker a core and one more (the e2e tests wait on operators half the time), a test file
# to a worker (module fixtures stay whole): on this 2-core machine 3 workers took 15 min,
# against 22 with one a core and 40 serial. PYTEST_WORKERS=N to choose. ruff first (a second);
# mypy and the layers (a minute of one core from a fresh clone) run beside pytest, their
# output shown and their result counted when it ends.
PYTEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: test-tools image
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	@log=$$(mktemp); \
	( $(VENV)/bin/mypy && $(VENV)/bin/lint-imports ) > $$log 2>&1 & typing=$$!; \
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadfile; tests=$$?; \
	wait $$typing; typed=$$?; \
	echo "=== mypy, lint-imports (beside pytest): exit $$typed ==="; cat $$log; rm -f $$log; \
	if [ $$tests -ne 0 ]; then exit $$tests; fi; exit $$typed

demo: demo-tools
	$(SPOTPOOL) demo

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
