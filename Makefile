# The two commands: `make install` and `make test` (lint, type check, strict docs build, tests). `make demo` builds
# demo data and runs the analyzer. All work on a fresh machine with Python 3.11 and make.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test test-all lint docs demo bench install wheel clean warm-kernels test-clients test-cluster test-clients-levanter \
	bench-peers

$(PY):
	@test -n "$(PYTHON)" || { echo "make: no python3.11 or python3 found; set PYTHON=..." >&2; exit 2; }
	$(PYTHON) -m venv $(VENV)

# uv installs the same versions pip resolves (checked: identical `pip freeze`) in half pip's CPU (57 against 122 s of
# CPU with a cold cache on 2 busy cores), byte-compiled like pip (Grain's workers start with `python -B`).
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install -q uv
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -e ".[dev,docs]"
	@touch $(STAMP)

install: $(STAMP)

# A wheel for machines without this checkout: dist/datatools_llm-VERSION-py3-none-any.whl, installed with
# pip install 'dist/datatools_llm-VERSION-py3-none-any.whl[jax]' (extras as usual). pip fetches the build backend
# (setuptools >= 77) from the package index; build/ is cleared first so a module deleted here is not packaged.
wheel: $(PY)
	rm -rf build dist
	$(PY) -m pip wheel --no-deps -q -w dist .

# ruff (lint, then the format check) and mypy, configured in pyproject.toml.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# The documentation site (mkdocs.yml, docs/): a strict build (a broken link or reference fails it) into site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site

# The numba kernels compiled into .numba_cache (`datatools warm --jobs 1`: ~30 s of CPU, in one process): the suite's
# processes then load them instead of each compiling them on first use. make test runs it beside lint and docs
# (make -j2); a failure here fails nothing (the tests say what is wrong).
warm-kernels: $(STAMP)
	-NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(VENV)/bin/datatools warm --jobs 1

# What runs where, how long each takes, and which changes must run make test-all: docs/testing.md.
# make test (CI, under 10 minutes on 2 cores): lint, types, docs, then every test but the `slow`, `cluster` and
# `timing` ones, 3 at a time on CI's 2 cores (the suite waits ~12% of its time: processes starting, loopback servers,
# a silent endpoint's timeouts; a third worker fills it), hypothesis's `ci` profile (each test's examples, derandomized: the same on every run; tests/conftest.py).
# tests/install/ installs the wheel of this checkout without extras into a fresh venv (pip resolves the base
# dependencies from the package index) and runs the README's data commands there: ~1.5 minutes on one busy core.
test: $(STAMP)
	$(MAKE) -j2 --no-print-directory warm-kernels lint docs
	HYPOTHESIS_PROFILE=ci NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) -m pytest -n 3 --dist worksteal --durations=20 \
		-m "not slow and not cluster and not timing" tests

# make test-all: make test's checks, then every test, with hypothesis's `all` profile (5x each test's examples, random):
# the suite but the cluster and timing tests 2 at a time, then those one at a time (a Ray cluster; wall-time bounds,
# which hold on a quiet machine, so nothing of the suite runs beside them). The client suites are their own targets:
# make test-clients (MaxText, transformers, and Levanter's) and make test-clients-levanter.
test-all: $(STAMP)
	$(MAKE) -j2 --no-print-directory warm-kernels lint docs
	HYPOTHESIS_PROFILE=all NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) -m pytest -n 2 -p no:cacheprovider -rfEs \
		-m "not cluster and not timing" tests
	HYPOTHESIS_PROFILE=all NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) -m pytest -p no:cacheprovider -rA \
		-m "cluster or timing" tests

# A part of make test-all: a two-node Ray cluster (ray start) writing to the S3 server, and the slow tests (the
# interpret-mode attention kernels among them). Run before changing the pre-tokenize job or the attention kernels.
test-cluster: $(STAMP)
	NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) -m pytest -p no:cacheprovider -rA -m "cluster or slow" tests

demo: $(STAMP)
	NUMBA_CACHE_DIR=$(CURDIR)/.numba_cache $(PY) scripts/demo.py

bench: $(STAMP)
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done

# The real clients, each in its own venv under .clients/ (4.8 GB; about 3 minutes to install here the first time):
# MaxText 0.2.5 (Python 3.12, CPU jax) and transformers 5.23.0 with torch 2.13.0 (CPU). Not part of `make test`
# (with the install it would double CI's time); run it before changing a batch format or an integration. The pages'
# blocks marked `client NAME` run there as printed: docs/levanter.md (clients/levanter/test_levanter_page.py),
# docs/trainers.md's MaxText and transformers sections (clients/*/test_*_trainers_page.py).
CLIENTS := .clients
MAXTEXT_VERSION := 0.2.5
TRANSFORMERS_VERSION := 5.23.0
TORCH_VERSION := 2.13.0
LEVANTER_VERSION := 0.2.227.dev40316220070
PYTHON312 ?= $(shell for p in python3.12 $(wildcard /root/.pyenv/versions/3.12*/bin/python3.12) $(wildcard /usr/bin/python3.12); do \
	$$p -c 'import sys; assert sys.version_info[:2] == (3, 12)' 2>/dev/null && echo $$p && break; done)

$(CLIENTS)/maxtext/.installed: pyproject.toml
	@test -n "$(PYTHON312)" || { echo "make: MaxText needs Python 3.12; none found (set PYTHON312=...)" >&2; exit 2; }
	$(PYTHON312) -m venv $(CLIENTS)/maxtext
	$(CLIENTS)/maxtext/bin/pip install -q --upgrade pip
	$(CLIENTS)/maxtext/bin/pip install -q "maxtext[tpu]==$(MAXTEXT_VERSION)" pytest
	$(CLIENTS)/maxtext/bin/pip install -q .
	@touch $@

$(CLIENTS)/hf/.installed: pyproject.toml
	@test -n "$(PYTHON)" || { echo "make: no python3.11 or python3 found; set PYTHON=..." >&2; exit 2; }
	$(PYTHON) -m venv $(CLIENTS)/hf
	$(CLIENTS)/hf/bin/pip install -q --upgrade pip
	$(CLIENTS)/hf/bin/pip install -q torch==$(TORCH_VERSION) transformers==$(TRANSFORMERS_VERSION) pytest
	$(CLIENTS)/hf/bin/pip install -q .
	@touch $@

# Levanter (Marin) 0.2.227 in its own venv (Python 3.12, CPU jax): about 4.5 minutes to install here, its tests
# 7-11 minutes on 2 busy cores (a cache built by Levanter itself, three short training runs).
$(CLIENTS)/levanter/.installed: pyproject.toml
	@test -n "$(PYTHON312)" || { echo "make: Levanter needs Python 3.12; none found (set PYTHON312=...)" >&2; exit 2; }
	$(PYTHON312) -m venv $(CLIENTS)/levanter
	$(CLIENTS)/levanter/bin/pip install -q --upgrade pip
	$(CLIENTS)/levanter/bin/pip install -q "marin-levanter==$(LEVANTER_VERSION)" pytest
	$(CLIENTS)/levanter/bin/pip install -q .
	@touch $@

# $(STAMP): the S3 server of clients/levanter/test_levanter_page.py is the dev venv's moto_server.
test-clients-levanter: $(CLIENTS)/levanter/.installed $(STAMP)
	$(CLIENTS)/levanter/bin/pip install -q --no-deps --force-reinstall .
	cd clients && JAX_PLATFORMS=cpu ../$(CLIENTS)/levanter/bin/python -m pytest -s -rA -p no:cacheprovider levanter

test-clients: $(CLIENTS)/maxtext/.installed $(CLIENTS)/hf/.installed test-clients-levanter
	$(CLIENTS)/hf/bin/pip install -q --no-deps --force-reinstall .
	$(CLIENTS)/maxtext/bin/pip install -q --no-deps --force-reinstall .
	cd clients && ../$(CLIENTS)/hf/bin/python -m pytest -s -rA -p no:cacheprovider transformers
	cd clients && JAX_PLATFORMS=cpu ../$(CLIENTS)/maxtext/bin/python -m pytest -s -rA -p no:cacheprovider maxtext

# The packing peers that benchmarks/pack.py runs in the same run (benchmarks/pack_peers.py), in their own venv
# (1.6 GB): TRL's pack_dataset (datasets, transformers; no torch needed) and OLMo-core's OBFD (imports torch, CPU).
# Both --no-deps: their full dependencies (accelerate, the cloud clients) are not needed to pack.
$(CLIENTS)/peers/.installed:
	@test -n "$(PYTHON)" || { echo "make: no python3.11 or python3 found; set PYTHON=..." >&2; exit 2; }
	$(PYTHON) -m venv $(CLIENTS)/peers
	$(CLIENTS)/peers/bin/pip install -q torch==$(TORCH_VERSION) numpy datasets transformers cached_path requests \
		rich dataclass-extensions importlib_resources omegaconf bettermap
	$(CLIENTS)/peers/bin/pip install -q --no-deps trl==1.16.0 ai2-olmo-core==3.0.0
	@touch $@

bench-peers: $(STAMP) $(CLIENTS)/peers/.installed
	$(PY) benchmarks/pack.py --peers $(CLIENTS)/peers/bin/python

clean:
	rm -rf $(VENV) .numba_cache .pytest_cache .mypy_cache .ruff_cache site build dist
