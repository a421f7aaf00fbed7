# The two commands: `make run` starts the proxy, `make test` runs the tests.
# Both create .venv with a Python >= 3.12 on first use.

PYTHON ?= $(shell for p in python3.12 python3.13 $(HOME)/.pyenv/versions/3.12*/bin/python3.12 $(HOME)/.pyenv/versions/3.13*/bin/python3.13 python3; do \
	  command -v $$p >/dev/null 2>&1 && $$p -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null && { echo $$p; break; }; done)
VENV := .venv
BIN := $(VENV)/bin
ARGS ?=

.PHONY: run test lint bench check-python clean

check-python:
	@test -n "$(PYTHON)" || { echo "modeltap needs Python >= 3.12 (mitmproxy 12 does). Install one, or pass PYTHON=/path/to/python3.12" >&2; exit 1; }

$(BIN)/modeltap: pyproject.toml | check-python
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	@touch $@

run: $(BIN)/modeltap
	$(BIN)/modeltap run $(ARGS)

test: $(BIN)/modeltap
	$(BIN)/python -m pytest -q $(ARGS)

bench: $(BIN)/modeltap
	$(BIN)/python bench/run.py $(ARGS)

lint: $(BIN)/modeltap
	$(BIN)/ruff check src tests addons examples bench scripts
	$(BIN)/ruff format --check src tests addons examples bench scripts
	$(BIN)/mypy

clean:
	rm -rf $(VENV) modeltap-out
