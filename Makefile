# Duplex-MPE harness. `make demo` and `make test` each do their own set-up first.
SHELL := /bin/bash
PY    := .venv/bin/python
PIP   := .venv/bin/pip
RUN   ?= demo
STAMP := .venv/.setup-stamp
APT_PKGS := espeak-ng sox

.PHONY: help setup demo test test-fast lint bench status clean-runs

help:  ## list targets
	@grep -E '^[a-z-]+:.*##' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

# apt packages when missing, then a venv with the pinned requirements. Idempotent: the
# stamp is newer than the requirement files when nothing changed, so a second run is instant.
$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing apt packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@test -x $(PY) || python3 -m venv .venv
	$(PIP) install -q --disable-pip-version-check -r requirements-dev.txt
	$(PIP) install -q --disable-pip-version-check --no-deps -e .
	@touch $(STAMP)

setup: $(STAMP)  ## install apt packages and the virtualenv (fast when done)

demo: setup  ## run the whole pipeline on the embedded default (RUN=demo)
	RAY_AUTH_MODE=disabled $(PY) -m jobs.pipeline run_id=$(RUN)

test: setup  ## run the test suite
	$(PY) -m pytest -q -p no:cacheprovider

test-fast: setup  ## the suite without the slow end-to-end tests
	$(PY) -m pytest -q -m "not slow"

lint: setup  ## ruff
	.venv/bin/ruff check .

bench: setup  ## benchmarks (figures, not assertions)
	$(PY) bench/vad_throughput.py
	$(PY) bench/reduce.py

status: setup  ## stage completion of a run (RUN=...)
	$(PY) -m jobs.status run_id=$(RUN)

clean-runs:  ## delete every local run under runs/
	rm -rf runs
