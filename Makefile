# One command runs the demo, one command runs every check. Both create .venv on first use,
# from the exact, hashed versions in requirements/dev.txt (`make lock` refreshes it).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements/dev.txt
DEMO_VENV := .venv-demo
DEMO_LOCK := requirements/demo.txt
PYTEST_WORKERS ?= 2

.PHONY: demo weekly-report lock test lint typecheck docs unit integration acceptance matrix oldest bench bench-peers bench-scale bench-targets chaos simulate screenshots clean

$(STAMP): pyproject.toml $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --require-hashes --no-deps -r $(LOCK)
	$(BIN)/pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/pip check
	touch $(STAMP)

# The demo's own virtualenv: the package and its core dependencies only, from requirements/demo.txt.
$(DEMO_VENV)/.installed: pyproject.toml $(DEMO_LOCK)
	$(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/pip install --quiet --require-hashes --no-deps -r $(DEMO_LOCK)
	$(DEMO_VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	$(DEMO_VENV)/bin/pip check
	touch $@

## lock: resolve the dev extra anew into requirements/dev.txt, and the core dependencies into
## requirements/demo.txt (every Python from 3.10, hashed)
lock: $(STAMP)
	$(BIN)/uv pip compile pyproject.toml --extra dev \
		--universal --python-version 3.10 --generate-hashes --upgrade --quiet \
		--custom-compile-command "make lock" -o $(LOCK)
	$(BIN)/uv pip compile pyproject.toml requirements/demo.in --constraint $(LOCK) \
		--universal --python-version 3.10 --generate-hashes --quiet \
		--custom-compile-command "make lock" -o $(DEMO_LOCK)

## demo: three safebeat replicas beside three stock beats, on SQLite, no server needed
## (in .venv-demo: the package and its core dependencies, none of the dev toolchain)
demo: $(DEMO_VENV)/.installed
	$(DEMO_VENV)/bin/python examples/demo.py

## weekly-report: the 12,400-mail incident with three beats, two workers, a redelivery and a kill
weekly-report: $(STAMP)
	$(BIN)/python examples/weekly_report/run.py

## test: lint, types, strict docs build and the whole test suite (what CI runs)
test: lint typecheck docs
	$(BIN)/pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25

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

SEEDS ?= 1000
STORE ?= memory

## simulate: the deterministic simulation of beats, broker, workers and faults over SEEDS
## seeds, against STORE (memory, or the real sqlite, postgres or redis: slower)
simulate: $(STAMP)
	$(BIN)/python -m tests.simulation --seeds $(SEEDS) --store $(STORE)

## screenshots: the web console's pictures in docs/, taken by the browser test (needs chromium)
screenshots: $(STAMP)
	SAFEBEAT_SCREENSHOTS=docs $(BIN)/pytest tests/acceptance/test_web_browser.py -k operator

## matrix: unit, contract and replica tests on the oldest versions pyproject.toml allows, on
## Celery 5.4, 5.5 and 5.6, and on the newest of everything (noxfile.py, about 20 minutes)
matrix: $(STAMP)
	$(BIN)/nox -s oldest celery54 celery55 celery56 latest

## oldest: the same on every lower bound in pyproject.toml at once
oldest: $(STAMP)
	$(BIN)/nox -s oldest

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

## bench-targets: issue 33's six performance targets in one run, one table of met or missed beside
## raw kombu and the peers (about 1.5 hours; TARGETS_ARGS=--quick checks the harness in ~10 minutes)
bench-targets: $(STAMP)
	$(BIN)/python tests/benchmarks/bench_targets.py $(TARGETS_ARGS)

## chaos: real beat replicas under faults, every window counted (docs/reliability.md);
## CHAOS_ARGS=--long for 10 replicas per store, --short for what CI runs
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos.report $(CHAOS_ARGS)

## release-check: the sdist and wheel built into dist/, `twine check`ed, the wheel installed
## in a clean virtualenv and run (the demo, three beats): what a release uploads
.PHONY: release-check
release-check: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --installer uv --outdir dist .
	$(BIN)/twine check --strict dist/*
	SAFEBEAT_TEST_DIST=dist $(BIN)/pytest tests/acceptance/test_built_wheel.py

## fuzz: the hostile-input property suite with 1,000 examples per store instead of CI's 20
.PHONY: fuzz
fuzz: $(STAMP)
	SAFEBEAT_FUZZ_PROFILE=hostile-long $(BIN)/pytest -n $(PYTEST_WORKERS) tests/integration/test_hostile_inputs.py

clean:
	rm -rf $(VENV) $(DEMO_VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis site
