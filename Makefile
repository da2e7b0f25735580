# normlab: `make lab` runs the main job, `make test` runs every check. Both create .venv and
# install everything on first use (torch==2.13.0 comes from the CPU wheel pip finds on disk).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lab test lint typecheck unit bench

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP)

# Until the web lab lands this shows what the lab will serve: every experiment and its parameters.
lab: install
	$(VENV)/bin/normlab list

lint: install
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

typecheck: install
	$(PY) -m mypy

unit: install
	$(PY) -m pytest

test: lint typecheck unit

bench: install
	$(PY) benchmarks/batchnorm.py
