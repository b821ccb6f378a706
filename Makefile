# The team's everyday commands. `make help` lists them.
PY ?= .venv/bin/python
export PYSPARK_PYTHON ?= $(abspath $(PY))

.PHONY: help setup fast test lint format typecheck bench demo ui airflow-env

help:  ## this list
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

setup:  ## .venv with rewindow, the test and dev tools
	test -x $(PY) || python3.11 -m venv .venv
	$(PY) -m pip install -q -e ".[test,dev]"

fast:  ## the fast tier: reference model, kernel against it, configuration (no Spark, about a minute)
	$(PY) -m pytest -q -m "not spark"

test:  ## the whole suite (README's command; Spark, Dagster, clusters, Airflow)
	$(PY) -m pytest -q

lint:  ## ruff (pycodestyle, pyflakes, bugbear, isort, blind excepts, unused noqas), ruff format --check, and mypy (strict: windowing, assets, orchestration)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

format:  ## ruff format: lay out every Python file as CI checks it
	$(PY) -m ruff format .

typecheck:  ## mypy only (strict: windowing, assets, orchestration; pyproject.toml)
	$(PY) -m mypy

bench:  ## rewindow against plain Spark (10 M events; QUICK=1 for 1 M)
	$(PY) bench/replay_bench.py $(if $(QUICK),--quick,) $(BENCH_ARGS)

demo:  ## the quick start's demo: sample history through Dagster
	$(PY) -m orchestration.demo

ui:  ## the Dagster UI on the demo's instance (http://127.0.0.1:3000), without dagster dev's `dg dev` notice
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/data/dagster_home} PYTHONWARNINGS='$(DEV_NOTICE)' \
	  $(dir $(PY))dagster dev -w workspace.yaml

# Dagster 1.13's `dagster dev` warns that `dg dev` (the separate dagster-dg-cli) supersedes it;
# `dagster dev` is what this repository's workspace.yaml is for, so the notice is filtered.
DEV_NOTICE := ignore:Function `dev_command` is superseded

airflow-env:  ## .venv-airflow: Airflow 3 with rewindow (scripts/airflow-env)
	scripts/airflow-env
