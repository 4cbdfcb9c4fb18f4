# The two commands of the README: `make demo` and `make test`. Each does its own
# set-up (virtual environment, Docker engine, base image) and is idempotent.

SHELL := /bin/bash
VENV  := .venv
BIN   := $(VENV)/bin
STAMP := $(VENV)/.installed
PYPROJECTS := pyproject.toml constraints.txt $(wildcard packages/*/pyproject.toml)

.PHONY: demo test setup vllm engine base-image postgres lint format bench docs clean

# make demo DEMO_ARGS=--tiny: the tiny model built from nothing instead of the real one;
# DEMO_ARGS="--engine auto" (or vllm) samples with vLLM where it measured faster (make vllm).
demo: setup engine base-image
	$(BIN)/python scripts/demo.py $(DEMO_ARGS)

# Most tests wait on Docker, servers and subprocesses, so 4 workers fit 2 cores; the tests
# that share a Ray cluster or a vLLM server each keep to one worker (xdist_group marks).
TEST_WORKERS ?= 4

test: setup vllm engine base-image postgres lint
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=30

setup: $(STAMP)

$(STAMP): $(PYPROJECTS) scripts/setup-venv.sh scripts/_install.sh
	scripts/setup-venv.sh

# vLLM's CPU build in .venv-vllm, for roll's managed inference server and its tests.
vllm: .venv-vllm/.installed

.venv-vllm/.installed: constraints-vllm.txt scripts/ensure-vllm.sh scripts/_install.sh
	scripts/ensure-vllm.sh

engine:
	scripts/ensure-docker.sh
	scripts/ensure-runsc.sh

base-image: setup engine
	$(BIN)/rock image build-base

# PostgreSQL on 127.0.0.1:55432 for the state-store tests (which run against SQLite too).
postgres:
	scripts/ensure-postgres.sh >/dev/null

# mypy's cache lives beside pip's and uv's, outside the checkout, so a fresh clone reuses it:
# a module whose source hash is unchanged is not checked again (66 s cold, 2 s warm here).
MYPY_CACHE ?= $(HOME)/.cache/ale-mypy

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --cache-dir "$(MYPY_CACHE)"

format: setup
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The documentation site (MkDocs, Material theme) from docs/ into site/; strict: a broken link
# or a page missing from the navigation fails it. make test checks the same (tests/test_docs.py).
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

bench: setup engine base-image
	@for b in benchmarks/[!_]*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

clean:
	rm -rf $(VENV) .venv-vllm .pytest_cache .ruff_cache .mypy_cache .hypothesis site
