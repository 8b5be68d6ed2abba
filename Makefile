# docstream — the two commands of the README, plus the stack and benchmarks.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup run test test-deps stack-up stack-down stack-status bench chaos lint lint-fast typecheck clean

# Create or refresh the virtualenv whenever pyproject.toml changes. uv (from PyPI, pinned) installs: it
# resolves what pip resolves, and links from its cache what an earlier install fetched (on the 2-core
# machine 25 s for the whole venv with uv's cache empty, 13 s with it filled, where pip took 150 s).
# --compile-bytecode writes every module's .pyc once, as pip does and uv by default does not: where
# PYTHONDONTWRITEBYTECODE is set, Python never writes them itself, and every process compiled torch,
# transformers and sentence-transformers from source again (12 of the 21 CPU seconds a service took to
# load its model on the 2-core Xeon; 9 with the .pyc files there).
UV_VERSION := 0.13.8
UV := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(BIN)/pip install -q uv==$(UV_VERSION)
	@echo "installing docstream into $(VENV) (first time: downloads torch, a few minutes)"
	@$(UV) -e '.[dev]'
	@touch $(STAMP)

# deploy/install-ocr.sh: Debian's Tesseract language data for OCR (a no-op once installed; root installs it);
# deploy/install-java.sh: a Java 17+ runtime and Maven for the Kafka broker that `docstream run` starts
# (docstream_cli.embedded_kafka; root installs Debian's, others are told the command); then the broker's jars,
# which Maven fetches once into ~/.cache/docstream/stack/lib/kafka (deploy/local/stack fetch), and their
# class-data archive, recorded once by starting and stopping a broker (python -m docstream_cli.embedded_kafka).
# Each is a no-op when done. Without Java 17+ the last two wait for it (one line says so; docstream run then
# says java_missing). -W: runpy warns that docstream.kafka (the package, imported first) had imported the module.
setup: $(STAMP)
	@bash deploy/install-ocr.sh
	@bash deploy/install-java.sh
	@if bash deploy/install-java.sh --check; then \
	  deploy/local/stack fetch kafka && $(BIN)/python -m docstream_cli.embedded_kafka; \
	else echo "setup: no Java 17+ yet (deploy/install-java.sh said how): skipped the Kafka jars and class-data archive"; fi

run: setup
	@$(BIN)/docstream run examples/*.pdf --out .docstream/results.jsonl; rc=$$?; \
	$(BIN)/python -m docstream_cli.ops.results_preview .docstream/results.jsonl; exit $$rc

# ruff and the import contracts beside the test dependencies (the installs mostly wait on downloads), then
# tests/run.sh (the stack, the three pytest runs), which runs mypy (a minute of CPU) beside the chaos
# scenarios, at the lowest priority, and fails when it fails.
test: setup
	@$(MAKE) --no-print-directory -j2 lint-fast test-deps
	@DOCSTREAM_TEST_ALSO="$(MAKE) --no-print-directory typecheck" bash tests/run.sh $(BIN)

# tests/install-chromium.sh: Debian's chromium for the dashboard's browser test (a no-op once installed);
# deploy/local/install-infinity.sh: the Infinity embedding server the endpoint tests run against, in
# .venv-infinity (docs/local-stack.md; a no-op once installed); deploy/local/install-llm.sh: the chat
# server and small model the generate tests run against, in .venv-llm (docs/local-stack.md);
# deploy/local/install-postgres.sh: Debian's PostgreSQL for the postgres sink's tests (docs/sinks.md; a
# no-op once installed)
test-deps: setup
	@bash tests/install-chromium.sh
	@bash deploy/local/install-postgres.sh
	@bash deploy/local/install-infinity.sh $(VENV)
	@bash deploy/local/install-llm.sh $(VENV)

# The single-node chaos suite and the lanes scenario at the issue's scale (tests/integration/test_lanes.py; make
# test runs its short version), then the cluster scenarios on a 3-broker, 3-node cluster that
# tests/run-cluster.sh starts and removes (docs/reliability.md "On a cluster").
chaos: setup
	@bash deploy/local/install-infinity.sh $(VENV)
	@DOCSTREAM_CHAOS_FULL=1 bash tests/run.sh $(BIN) tests/chaos tests/integration/test_lanes.py -m "not cluster"
	@DOCSTREAM_CHAOS_FULL=1 bash tests/run-cluster.sh $(BIN)

stack-up:
	@deploy/local/stack up

stack-down:
	@deploy/local/stack down

stack-status:
	@deploy/local/stack status

# The [bench] extra (ray[data]) for compare.py's variant (c), refreshed when pyproject.toml changes.
$(VENV)/.bench-installed: $(STAMP) pyproject.toml
	@$(UV) -e '.[bench]'
	@touch $@

bench: setup $(VENV)/.bench-installed
	@$(BIN)/python benchmarks/run_all.py

# ruff; the import contracts of pyproject.toml (layers, pure modules); mypy strict over the library,
# the composition root and every service.
lint: lint-fast typecheck

lint-fast: setup
	@$(BIN)/ruff check libs services tests benchmarks examples
	@$(BIN)/lint-imports --no-cache

typecheck: setup
	@$(BIN)/mypy libs/common/docstream services/*/docstream_* examples/custom_task

clean:
	rm -rf .docstream .pytest_cache
