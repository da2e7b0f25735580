# normlab: `make lab` runs the main job, `make test` runs every check. Both create .venv and
# install everything on first use (torch==2.13.0 comes from the CPU wheel pip finds on disk).
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install lab chromium test lint typecheck unit parallel serial bench calibrate screenshots

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,sweep,ray]'
	@touch $(STAMP)

install: $(STAMP)

# The web lab on http://127.0.0.1:8000/ (HOST=... PORT=... to change).
HOST ?= 127.0.0.1
PORT ?= 8000
lab: install
	$(VENV)/bin/normlab lab --host $(HOST) --port $(PORT)

# Browser tests drive Debian's Chromium (never a downloaded browser); install it when missing.
# The playground's sandbox needs bubblewrap (bwrap); install it too.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing Debian's chromium for the browser tests"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }
	@command -v bwrap >/dev/null 2>&1 || { \
	  echo "installing bubblewrap for the playground's sandbox"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap; }
	@test -f /usr/share/fonts/truetype/dejavu/DejaVuMathTeXGyre.ttf || { \
	  echo "installing a math font for the lessons' formulas"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq fonts-dejavu-extra; }

lint: install
	$(PY) -m ruff check src tests benchmarks
	$(PY) -m ruff format --check src tests benchmarks

typecheck: install
	$(PY) -m mypy

# The suite in two parts: every test file but the `serial` ones on JOBS workers (pytest-xdist, a
# file to a worker, so a file's fixtures are made once), then the `serial` ones alone, as their
# timings and sandbox limits assume no other test shares the cores. Either part failing, or
# collecting nothing (pytest's status 5), fails make. OMP_WAIT_POLICY=PASSIVE: torch's idle
# OpenMP threads sleep rather than spin, which changes no arithmetic but keeps two workers' thread
# pools (and the labs and scripts they start) from spinning against each other on two cores.
# PYTHONDONTWRITEBYTECODE emptied: where the environment sets it (as CI images often do), no
# bytecode is cached, so each worker and every lab and CLI subprocess compiles the
# package again, and each pytest process rewrites every test module's asserts again (7 s of
# CPU a pytest process on a fresh clone, 0.3 s a CLI subprocess). Caching changes no result.
# JOBS: three workers on the two cores the suite is sized for. With one worker a core, a
# quarter of the cores' time went idle (tests waiting on a server, a browser or a subprocess
# they started): 851 s for the parallel part against 792 s with a third worker, same machine.
# OMP_NUM_THREADS=1 in the parallel part: one torch intra-op thread a process (the workers and
# every lab, kernel and script they start, which inherit it). The workers already fill the
# cores; a second intra-op thread each only adds threads that wait for a core and for one
# another, which costs CPU time: back to back on this machine, the parallel part took 712.3 s
# with torch's default two threads and 616.8 s with one (about 1,350 and 1,176 core-seconds).
# Results are keyed by their thread count wherever they are kept (the lab's answers store), and
# a lab computes with one thread unless told otherwise. The serial part keeps the default: its
# tests measure threads and time as a user's machine has them.
JOBS ?= 3
WORKERS := -n $(JOBS) --dist loadfile
parallel serial: export OMP_WAIT_POLICY = PASSIVE
parallel serial: export PYTHONDONTWRITEBYTECODE =
parallel: install chromium
	OMP_NUM_THREADS=1 $(PY) -m pytest $(WORKERS) -m "not serial"
serial: install chromium
	$(PY) -m pytest -m serial

unit:
	$(MAKE) parallel
	$(MAKE) serial

# ruff and mypy run beside the parallel part: mypy holds one core for about half a minute, and
# run first, it left the other core idle meanwhile. The serial part still runs alone, last.
test: install chromium
	$(MAKE) --jobs=3 --output-sync=line lint typecheck parallel
	$(MAKE) serial

# The doctor over every model family transformers builds, small and at its standard init
# (issue 30): the table in docs/zoo.md, then the no-false-alarm test over the whole zoo (the
# `zoo` tests, which `make test` skips).
calibrate: export OMP_WAIT_POLICY = PASSIVE
calibrate: install
	$(PY) -m tests.hfzoo --write docs/zoo.md
	$(PY) -m pytest -m zoo tests/test_hfzoo.py

bench: install
	$(PY) benchmarks/batchnorm.py
	$(PY) benchmarks/widgets.py
	$(PY) benchmarks/browser_pages.py
	$(PY) benchmarks/playground.py
	$(PY) benchmarks/probe.py
	$(PY) benchmarks/answers.py
	$(PY) benchmarks/startup.py
	$(PY) benchmarks/trainview.py
	$(PY) benchmarks/widgetstream.py
	$(PY) benchmarks/maxima.py
	$(PY) benchmarks/theory.py

# The browser tests, saving their screenshots to test-artifacts/screenshots/ (a plain run takes
# none: no test reads them, and a long lesson's costs Chromium about a second).
screenshots: export NORMLAB_SCREENSHOTS = 1
screenshots: install chromium
	$(PY) -m pytest $(WORKERS) -m browser tests/browser
