# `make train` and `make test` set up .venv themselves and reuse it while setup.py is unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/quickstart.py
WORKDIR ?= runs/quickstart
ARGS ?=

.PHONY: train test test-all test-fast test-counts coverage docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: setup.py | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(VENV)/.installed-test: setup.py | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@ $(VENV)/.installed

train: $(VENV)/.installed
	$(BIN)/python -m pretrain train --config=$(CONFIG) --workdir=$(WORKDIR) $(ARGS)

# Three test files at a time on CI's two cores (each file's tests in one worker, so a module's shared fixture runs
# once): tests wait on subprocesses, imports, files and compiles, so two workers kept the cores 80% busy (159% CPU
# over a clean `make test`); the longest files start first (tests/conftest.py), which needs
# --no-loadscope-reorder: pytest-xdist 3.7+ otherwise starts the files with the most tests first, and the four
# longest finished among the last 15% of the tests. CI runs `make test`: every test but the `extended` ones
# (tests/conftest.py), which `make test-all` adds.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "not extended" tests

test-all: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder tests

# The tests that neither train a model nor start a process (the `slow` marker: tests/conftest.py), in minutes.
test-fast: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 3 --dist loadfile --no-loadscope-reorder -m "not slow" tests

# How many tests each target runs (the README's figures), from pytest's own collection.
test-counts: $(VENV)/.installed-test
	@for m in "" "not extended" "not slow"; do \
	  printf '%-14s %s\n' "$${m:-all}" "$$($(BIN)/python -m pytest -q --collect-only -p no:cacheprovider $${m:+-m "$$m"} tests 2>/dev/null | tail -1)"; \
	done

# Line coverage of `make test`'s tests, the processes they start included (.coveragerc): the figure a change to
# the tests holds before and after. Its last line is the total; .coverage keeps the lines (coverage report -m).
coverage: $(VENV)/.installed-test
	rm -f .coverage .coverage.*
	COVERAGE_FILE=$(CURDIR)/.coverage $(BIN)/python -m coverage run -m pytest -q -n 3 --dist loadfile \
	  --no-loadscope-reorder -m "not extended" tests
	$(BIN)/python -m coverage combine -q
	$(BIN)/python -m coverage report --sort=cover

# The documentation site (mkdocs.yml, docs/) into site/; the test suite builds it with --strict too.
docs: $(VENV)/.installed-test
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) runs site
