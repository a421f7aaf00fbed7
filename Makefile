# The two commands: `make run` starts the proxy, `make test` runs the tests.
# Both create .venv with a Python >= 3.12 on first use. Each installs what it
# needs and no more: `run` the package and its runtime dependencies, `demo`
# adds the openai SDK its scripted agent uses, `test` (and `lint`, `bench`) the
# test extras (the SDKs, Playwright, chdb, mypy...: ten times the size).

PYTHON ?= $(shell for p in python3.12 python3.13 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 $(HOME)/.pyenv/versions/3.13*/bin/python3.13 python3; do \
	  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=
# One stamp per set of extras installed, so `make run` never installs the tests'.
RUN_DEPS := $(VENV)/.installed-run
DEMO_DEPS := $(VENV)/.installed-demo
TEST_DEPS := $(VENV)/.installed-test

.PHONY: run demo test lint bench check-python clean

check-python:
	@test -n "$(PYTHON)" || { echo "modeltap needs Python >= 3.12 (mitmproxy 12 does). Install one, or pass PYTHON=/path/to/python3.12" >&2; exit 1; }

$(BIN)/python: | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(RUN_DEPS): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	@touch $@

$(DEMO_DEPS): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[demo]'
	@touch $@

$(TEST_DEPS): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

run: $(RUN_DEPS)
	$(BIN)/modeltap run $(ARGS)

demo: $(DEMO_DEPS)
	$(BIN)/modeltap demo $(ARGS)

# The tests run in parallel (pytest-xdist), one worker per core and one more:
# many tests spend their time waiting on a socket or a process they started.
# Work stealing keeps each worker on runs of tests from the same files (their
# module fixtures start once or twice) and moves the rest to whoever is idle.
# PYTHONDONTWRITEBYTECODE is cleared so the rewritten test modules are cached
# (__pycache__, ignored by git) instead of rewritten by every worker every run.
TEST_WORKERS ?= $(shell echo $$(( $$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo 1) + 1 )))

test: $(TEST_DEPS)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal $(ARGS)

bench: $(TEST_DEPS)
	$(BIN)/python bench/run.py $(ARGS)

lint: $(TEST_DEPS)
	$(BIN)/ruff check src tests addons examples bench scripts
	$(BIN)/ruff format --check src tests addons examples bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) modeltap-out
