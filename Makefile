# Epochal -- every target documents itself: `make help`.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PORT ?= 8080
DEMO_ARGS ?=
export PYSPARK_PYTHON := $(abspath $(BIN)/python)

.DEFAULT_GOAL := help

help: ## List the targets
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  make %-13s %s\n", $$1, $$2}'

$(BIN)/python:
	@command -v $(PYTHON) >/dev/null || { echo "Python 3.11 is required: install python3.11 (or set PYTHON=/path/to/python3.11)"; exit 2; }
	$(PYTHON) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml constraints.txt
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev]'
	@touch $(STAMP)

install: $(STAMP) ## Create .venv and install Epochal with its pinned, tested dependencies

lint: $(STAMP) ## ruff, import-linter (layer rules) and mypy (strict on state_store)
	$(BIN)/ruff check .
	PYTHONPATH=plugins $(BIN)/lint-imports
	$(BIN)/mypy state_store spark_jobs plugins/epochal_airflow

browser-deps: ## Headless Chromium for the UI browser test (Debian chromium + chromium-driver), if it can
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "browser-deps: chromium and chromedriver are installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "browser-deps: installing chromium chromium-driver (apt-get)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium chromium-driver >/dev/null 2>&1; }; } || \
	  echo "browser-deps: could not install chromium; the browser test will be skipped (see its reason)"; \
	else \
	  echo "browser-deps: chromium is missing and apt-get needs root; the browser test will be skipped"; \
	fi

postgres-deps: ## PostgreSQL server for the Postgres sink tests (Debian postgresql), if it can
	@if [ -n "$$EPOCHAL_PG_BIN" ] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
	  echo "postgres-deps: the PostgreSQL server is installed"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "postgres-deps: installing postgresql (apt-get)"; \
	  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1 || \
	    { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql >/dev/null 2>&1; }; } || \
	  echo "postgres-deps: could not install postgresql; the Postgres sink tests will fail under CI=true and be skipped elsewhere"; \
	else \
	  echo "postgres-deps: PostgreSQL is missing and apt-get needs root; the Postgres sink tests will be skipped (they fail under CI=true)"; \
	fi

test: lint browser-deps postgres-deps ## Lint, then the whole pytest suite (unit + integration: SeaweedFS, Spark, Airflow, Chromium, PostgreSQL)
	$(BIN)/pytest -n 2 --dist loadfile tests/integration tests/chaos tests/security
	$(BIN)/pytest -n 2 --dist worksteal tests/unit

demo: $(STAMP) ## The example pipeline end to end: local store, Spark local[*], Airflow with SQLite
	PYTHONPATH=plugins:. $(BIN)/python deploy/demo.py $(DEMO_ARGS)

ui: $(STAMP) ## Airflow's UI locally on the demo's home and store (PORT=8080); Ctrl-C stops all of it
	PYTHONPATH=plugins:. $(BIN)/python deploy/ui.py --port $(PORT)

clean: ## Remove the venv, caches and demo output
	rm -rf $(VENV) .demo .demo-store .ui .pytest_cache .mypy_cache .ruff_cache build *.egg-info

.PHONY: help install lint browser-deps postgres-deps test demo ui clean
