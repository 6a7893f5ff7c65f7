# `make demo` and `make test` set everything up themselves on a fresh machine:
# a virtualenv in .venv, llamalab and its dependencies, and (on first use) the pinned llama.cpp build
# in ~/.cache/llamalab (override with LLAMALAB_HOME).
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
PYTEST_ARGS ?=
# Python may cache compiled modules in __pycache__ (git ignores it) even where the environment says not to: each
# pytest worker otherwise compiles every test module again (and rewrites its asserts), and each `llamalab` the tests
# start in a subprocess compiles every llamalab module it imports (`make test-fast`: collection 9 s -> 4 s a worker,
# the suite 119 s -> 109 s on two cores; benchmarks/ci-time/README.md).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup demo lint test test-fast test-offline docs clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(BIN)/llamalab demo

# `make lint`: the static checks, as pyproject.toml configures them: ruff over the whole tree (sources, tests,
# scripts, benchmarks), then mypy over src/llamalab (llamacpp/, store/ and study/ held to its strict flags).
# `make test` and `make test-fast` run it first: a suite never runs on code that fails them (docs/architecture.md,
# "Static checks").
lint: setup
	$(BIN)/ruff check . && $(BIN)/mypy

# `make test`: the whole suite, in two passes. First everything but the `timed` tests, one pytest-xdist worker per
# core (`TEST_WORKERS`), a test module to a worker (`--dist loadgroup`, each module its own group, tests/conftest.py:
# a module's fixtures, such as a study it runs once for all its tests, are made once), except that the tests of a
# module marked `spread` (no module fixture) go to whichever worker is free; the heaviest modules start first
# (conftest's HEAVY_FIRST, `--no-loadscope-reorder` keeping that order), so no long module is left to one worker at
# the end while the other idles. The workers share one build cache, whose trees and downloads are built
# under a lock, once. Then the `timed` tests alone, one at a time: they compare speeds measured on this machine or
# hold a wall-time bar, which another worker's load would move. Both passes run whatever the first gave; pytest's 5
# (no test collected, as under a `-k` that matches none) is no failure. `JUNIT=DIR` writes each pass's JUnit XML there.
TEST_WORKERS ?= auto
JUNIT ?=
junit = $(if $(JUNIT),--junitxml=$(JUNIT)/$(1).xml)
# after a pass: keep its exit status in rc unless it passed or collected nothing
kept = || { r=$$?; [ $$r -eq 5 ] || rc=$$r; }

test: setup lint
	@rc=0; \
	$(BIN)/python -m pytest -m "not timed" -n $(TEST_WORKERS) --maxprocesses 8 --dist loadgroup --no-loadscope-reorder \
	  $(call junit,parallel) $(PYTEST_ARGS) $(kept); \
	$(BIN)/python -m pytest -m timed $(call junit,timed) $(PYTEST_ARGS) $(kept); \
	exit $$rc

# The fast suite: no llama.cpp and no network (it passes inside `unshare -n` once `make setup` has installed
# everything), under a minute on two cores (about 50 s with `make lint`; benchmarks/ci-time/README.md). Its tests are
# independent of each other, so they run on one pytest-xdist worker per core (at most 8; an idle worker takes tests
# queued for a busy one), the heaviest modules first (tests/conftest.py). `make test` keeps a module on one worker
# (above): the llama.cpp tests share one build and time real servers.
FAST = -m "not llama and not slow and not network" -n auto --maxprocesses 8 --dist worksteal

test-fast: setup lint
	$(BIN)/python -m pytest $(FAST) $(PYTEST_ARGS)

# The fast suite with the network really off (as root): a private network namespace with only its loopback up.
# A bare `unshare -n make test-fast` works too; the few tests that need 127.0.0.1 then say so and skip.
test-offline: setup
	unshare -n sh -c 'ip link set lo up && exec $(BIN)/python -m pytest $(FAST) $(PYTEST_ARGS)'

docs: setup
	$(BIN)/python scripts/gen_cli_docs.py

clean:
	rm -rf $(VENV) .pytest_cache test-artifacts
