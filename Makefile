# The two commands: `make demo` and `make test`. Both work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test demo bench install clean

$(PY):
	@test -n "$(PYTHON)" || { echo "make: no python3.11 or python3 found; set PYTHON=..." >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q -e ".[dev]"
	@touch $(STAMP)

install: $(STAMP)

test: $(STAMP)
	NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) -m pytest -n 2 tests

demo: $(STAMP)
	NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) scripts/demo.py

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache
