# `make train` and `make test` set up .venv themselves and reuse it while setup.py is unchanged.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
CONFIG ?= configs/quickstart.py
WORKDIR ?= runs/quickstart
ARGS ?=

.PHONY: train test clean

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

# Two test files at a time (each file's tests in one worker, so a module's shared fixture runs once): most tests
# wait on a subprocess, an import or a compile, which leaves the other core idle.
test: $(VENV)/.installed-test
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests

clean:
	rm -rf $(VENV) runs
