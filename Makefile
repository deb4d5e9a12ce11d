# One command runs the demo, one command runs every check. Both create .venv on first use.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_WORKERS ?= 2

.PHONY: demo weekly-report test lint typecheck docs unit integration acceptance matrix oldest bench bench-peers bench-scale bench-targets chaos clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

## demo: three safebeat replicas beside three stock beats, on SQLite, no server needed
demo: $(STAMP)
	$(BIN)/python examples/demo.py

## weekly-report: the 12,400-mail incident with three beats, two workers, a redelivery and a kill
weekly-report: $(STAMP)
	$(BIN)/python examples/weekly_report/run.py

## test: lint, types, strict docs build and the whole test suite (what CI runs)
test: lint typecheck docs
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site

unit: $(STAMP)
	$(BIN)/pytest tests/unit

integration: $(STAMP)
	$(BIN)/pytest tests/integration

acceptance: $(STAMP)
	$(BIN)/pytest tests/acceptance

## matrix: unit, contract and replica tests on the oldest versions pyproject.toml allows, on
## Celery 5.4, 5.5 and 5.6, and on the newest of everything (noxfile.py; nox from .venv if there)
matrix:
	$(if $(wildcard $(BIN)/nox),$(BIN)/nox,nox) -s oldest celery54 celery55 celery56 latest

## oldest: the same on every lower bound in pyproject.toml at once
oldest:
	$(if $(wildcard $(BIN)/nox),$(BIN)/nox,nox) -s oldest

## bench: dispatch-time and round-trip figures, safebeat beside stock beat (not pass/fail)
bench: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_dispatch.py

## bench-peers: safebeat beside stock beat, django-celery-beat, RedBeat and raw publishing (about an hour)
bench-peers: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_peers.py --profile postgres,django

## bench-scale: replicas 1/2/3 on a 100,000-window burst, 1,000,000 entries on one replica,
## idle cost, django-celery-beat rows (docs/performance.md); SCALE_ARGS for bench_scale.py's flags
bench-scale: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_scale.py $(SCALE_ARGS)

## bench-targets: the performance page's five targets in one run, met or missed (an hour or more)
bench-targets: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_targets.py $(TARGETS_ARGS)

## chaos: real beat replicas under faults, every window counted (docs/reliability.md);
## CHAOS_ARGS=--long for 10 replicas per store, --short for what CI runs
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.report $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site
