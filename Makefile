# docstream — the two commands of the README, plus the stack and benchmarks.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: help setup lock upgrade run test test-deps test-deps-debian test-deps-infinity test-deps-llm unit check stack-up stack-down stack-status bench chaos lint lint-fast \
	typecheck clean
# `make` alone installs the venv (the rule just below), as it always has; `make help` lists the targets.
.DEFAULT_GOAL := $(STAMP)

# Create or refresh the virtualenv whenever pyproject.toml or requirements.lock changes. uv (from PyPI,
# pinned) installs: it resolves what pip resolves, many times faster, and links from its cache what an
# earlier install fetched. --compile-bytecode writes every module's .pyc once, as pip does and uv by
# default does not: where PYTHONDONTWRITEBYTECODE is set, Python never writes them itself, and every
# process would compile torch, transformers and sentence-transformers from source again (most of the CPU
# time a service takes to load its model).
# requirements.lock pins every package the project and its [dev] extra resolve to (torch and its CUDA
# wheels from PyPI, pymupdf included), so that every clone installs the same versions; the project
# itself is resolved against those pins: a pin pyproject.toml no longer allows fails the install rather
# than moving silently (a dependency the lock does not name yet is installed at its newest version until
# the lock is made again). After a change of dependencies in pyproject.toml: `make lock` (re-resolves,
# keeping every pin that still fits); to move to the newest versions pyproject.toml allows: `make
# upgrade`. Commit requirements.lock with pyproject.toml.
UV_VERSION := 0.13.8
LOCK := requirements.lock
UV := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
# the venv and the pinned uv, for the install and for `make lock`
define VENV_WITH_UV
@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
@$(BIN)/pip install -q uv==$(UV_VERSION)
endef
# --universal: one lock for every platform, packages of one platform only (the CUDA wheels: Linux) under
# their markers; Python 3.11, as pyproject.toml requires (--fork-strategy fewest: one version of each
# package, not a second one for Pythons newer than the project allows).
LOCK_COMPILE := $(BIN)/uv pip compile -q pyproject.toml --extra dev --universal --fork-strategy fewest --python-version 3.11 \
	--custom-compile-command 'make lock' -o $(LOCK)
$(STAMP): pyproject.toml $(LOCK)
	$(VENV_WITH_UV)
	@echo "installing docstream into $(VENV) (first time: downloads torch, a few minutes)"
	@$(UV) -r $(LOCK) -e '.[dev]'
	@touch $(STAMP)

lock: ## re-resolve requirements.lock after pyproject.toml changed, keeping the pins that still fit
	$(VENV_WITH_UV)
	@$(LOCK_COMPILE)

upgrade: ## re-resolve requirements.lock to the newest versions pyproject.toml allows
	$(VENV_WITH_UV)
	@$(LOCK_COMPILE) --upgrade

help: ## list the targets
	@grep -hE '^[a-z][a-z-]*:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

# deploy/install-ocr.sh: Debian's Tesseract language data for OCR (a no-op once installed; root installs it);
# deploy/install-java.sh: a Java 17+ runtime and Maven for the Kafka broker that `docstream run` starts
# (docstream_cli.embedded_kafka; root installs Debian's, others are told the command); then the broker's jars,
# which Maven fetches once into ~/.cache/docstream/stack/lib/kafka (deploy/local/stack fetch), and their
# class-data archive, recorded once by starting and stopping a broker (python -m docstream_cli.embedded_kafka).
# Each is a no-op when done. Without Java 17+ the last two wait for it (one line says so; docstream run then
# says java_missing).
setup: $(STAMP) ## the venv, then OCR data, Java and the Kafka jars (each a no-op once done)
	@bash deploy/install-ocr.sh
	@bash deploy/install-java.sh
	@if bash deploy/install-java.sh --check; then \
	  deploy/local/stack fetch kafka && $(BIN)/python -m docstream_cli.embedded_kafka; \
	else echo "setup: no Java 17+ yet (deploy/install-java.sh said how): skipped the Kafka jars and class-data archive"; fi

run: setup ## docstream run over examples/*.pdf, then a preview of the results
	@$(BIN)/docstream run examples/*.pdf --out .docstream/results.jsonl; rc=$$?; \
	$(BIN)/python -m docstream_cli.ops.results_preview .docstream/results.jsonl; exit $$rc

# tests/run.sh: it starts the stack, and while the stack starts runs ruff and the import contracts beside the
# test dependencies' installs (the installs mostly wait on downloads; the three of them run side by side), then
# the three pytest runs; it runs mypy (a minute of CPU) beside the chaos scenarios, at the lowest priority, and
# fails when either fails.
test: setup ## everything: linters, the local stack, the unit, integration, e2e and short chaos tests
	@DOCSTREAM_TEST_FIRST="$(MAKE) --no-print-directory -j4 lint-fast test-deps" \
	  DOCSTREAM_TEST_ALSO="$(MAKE) --no-print-directory typecheck" bash tests/run.sh $(BIN)

# tests/install-chromium.sh: Debian's chromium for the dashboard's browser test (a no-op once installed);
# deploy/local/install-infinity.sh: the Infinity embedding server the endpoint tests run against, in
# .venv-infinity (docs/local-stack.md; a no-op once installed); deploy/local/install-llm.sh: the chat
# server and small model the generate tests run against, in .venv-llm (docs/local-stack.md);
# deploy/local/install-postgres.sh: Debian's PostgreSQL for the postgres sink's tests (docs/sinks.md; a
# no-op once installed). They need the venv, not the rest of setup: under `make test` setup has run, and its
# Kafka step would wait for the stack's lock while the stack starts. Debian's two go one after the other (one
# dpkg at a time); the two venvs beside them (uv's cache takes its own locks).
test-deps: test-deps-debian test-deps-infinity test-deps-llm ## what the tests run against: chromium, PostgreSQL, Infinity, the chat model

test-deps-debian: $(STAMP)
	@bash tests/install-chromium.sh
	@bash deploy/local/install-postgres.sh

test-deps-infinity: $(STAMP)
	@bash deploy/local/install-infinity.sh $(VENV)

test-deps-llm: $(STAMP)
	@bash deploy/local/install-llm.sh $(VENV)

# The single-node chaos suite and the lanes scenario at full scale (tests/integration/test_lanes.py; make
# test runs its short version), then the cluster scenarios on a 3-broker, 3-node cluster that
# tests/run-cluster.sh starts and removes (docs/reliability.md "On a cluster").
chaos: setup ## the full chaos suite, then the cluster scenarios (a 3-broker, 3-node cluster)
	@bash deploy/local/install-infinity.sh $(VENV)
	@DOCSTREAM_CHAOS_FULL=1 bash tests/run.sh $(BIN) tests/chaos tests/integration/test_lanes.py -m "not cluster"
	@DOCSTREAM_CHAOS_FULL=1 bash tests/run-cluster.sh $(BIN)

stack-up: ## start the local Kafka and Cassandra (deploy/local/stack)
	@deploy/local/stack up

stack-down: ## stop the local stack
	@deploy/local/stack down

stack-status: ## is the local stack up
	@deploy/local/stack status

# The [bench] extra (ray[data]) for compare.py's variant (c), refreshed when pyproject.toml changes; held to
# requirements.lock, so that it never moves a package the rest of the project was locked at.
$(VENV)/.bench-installed: $(STAMP) pyproject.toml $(LOCK)
	@$(UV) -e '.[bench]' -c $(LOCK)
	@touch $@

bench: setup $(VENV)/.bench-installed ## the benchmarks (benchmarks/run_all.py)
	@$(BIN)/python benchmarks/run_all.py

# ruff; the import contracts of pyproject.toml (layers, pure modules); mypy strict over the library,
# the composition root and every service. They need the venv only, not the rest of setup (Java, OCR data).
LINT_PATHS := libs services tests benchmarks examples tools
lint: lint-fast typecheck ## ruff, the import contracts and mypy

lint-fast: $(STAMP) ## ruff and the import contracts
	@$(BIN)/ruff check $(LINT_PATHS)
	@$(BIN)/lint-imports --no-cache

typecheck: $(STAMP) ## mypy, strict, over the library, the services, examples/custom_task and tools
	@$(BIN)/mypy libs/common/docstream services/*/docstream_* examples/custom_task tools

# The unit tests alone: no stack, no server, only the venv; as tests/run.sh runs them (the project's modules
# compiled to .pyc once, where PYTHONDONTWRITEBYTECODE is set; whole files on two workers, the longest
# first: tests/fixtures/ordering.py). Extra pytest arguments: make unit PYTEST_ARGS='-k avro'.
PYTEST_ARGS ?=
unit: $(STAMP) ## the unit tests (tests/unit) on 2 workers: no stack, no servers
	@$(BIN)/python -m compileall -q -j 0 libs services tests >/dev/null
	@$(BIN)/python -m pytest tests/unit -q -n 2 --dist loadfile --no-loadscope-reorder --durations=10 $(PYTEST_ARGS)

# Before a commit: the linters, then the unit tests (no stack).
check: lint-fast typecheck unit ## ruff, the import contracts, mypy, then make unit

clean: ## remove .docstream and .pytest_cache
	rm -rf .docstream .pytest_cache
