# `make demo` and `make test` set everything up themselves on a fresh machine:
# a virtualenv in .venv, llamalab and its dependencies, and (on first use) the pinned llama.cpp build
# in ~/.cache/llamalab (override with LLAMALAB_HOME).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: setup demo test test-fast docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/llamalab demo

# pytest exits 5 when it collects no tests; that is not a failure of the suite.
test: setup
	$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then exit 0; fi; exit $$rc

test-fast: setup
	$(BIN)/python -m pytest -m "not llama" $(PYTEST_ARGS)

docs: setup
	$(BIN)/python scripts/gen_cli_docs.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
