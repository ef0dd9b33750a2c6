# make run   - the app on the embedded default (SQLite, no Redis needed)
# make test  - the whole suite on PostgreSQL, and the SQLite tier beside it (PostgreSQL and Redis must be up)

VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/nrllm_agents
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
SQLITE_TEST_REDIS_URL ?= redis://127.0.0.1:6379/14
PYTEST_ARGS ?=
# Development mode for everything make starts (debug pages, a local key kept in .dev-secret-key).
# Production sets DJANGO_SECRET_KEY and leaves DJANGO_DEBUG unset (README, "Security").
export DJANGO_DEBUG ?= 1

.PHONY: lint docs dist run worker demo test test-fast test-postgres test-postgres-e2e test-postgres-e2e-a test-postgres-e2e-b test-sqlite-then-e2e-b test-postgres-rest test-sqlite test-django52 coverage-modules venv lock migrate bench clean

# The virtualenv, installed from the lock of its stack (locks/): the same versions everywhere.
# Also .env (ignored by git), which manage.py reads when no DJANGO_SECRET_KEY is set: development
# mode for `.venv/bin/python manage.py ...` typed by hand, as the docs write it.
venv:
	@bash scripts/venv.sh $(VENV)
	@test -f .env || printf '# written by make venv; manage.py reads it when DJANGO_SECRET_KEY is unset (a deploy sets one)\nDJANGO_DEBUG=1\n' >.env

# The locks CI installs, one per supported stack, compiled from requirements-dev.txt (the project's
# dependencies with every extra, and the tools; the project itself is installed apart, editable,
# without dependencies). uv resolves for a Python other than the one it runs on, so both stacks
# lock from one machine in seconds. Pins already in a lock are kept; LOCK_ARGS=--upgrade takes the
# newest of everything, LOCK_ARGS="--upgrade-package django" of one.
UV ?= uv
LOCK_ARGS ?=
LOCK := --quiet --python-platform linux --no-emit-package nrllm-agents --custom-compile-command "make lock" $(LOCK_ARGS)
lock:
	@command -v $(UV) >/dev/null || { echo "make lock: needs uv (pipx install uv, or pip install uv in a venv of its own and pass UV=/path/to/uv)" >&2; exit 2; }
	$(UV) pip compile $(LOCK) --python-version 3.13 locks/py313-django6.in -o locks/py313-django6.txt
	$(UV) pip compile $(LOCK) --python-version 3.11 locks/py311-django52.in -o locks/py311-django52.txt

# The distribution, as a host project installs it before it is published: the sdist and the wheel
# in dist/ (`pip install dist/nrllm_agents-*.whl`), built with the project's backend from the
# venv (no isolation: the locked hatchling, no download), then checked as PyPI would (twine).
DIST ?= dist
dist: venv
	@rm -rf $(DIST)
	$(PY) -m build --sdist --wheel --no-isolation --outdir $(DIST) .
	$(PY) -m twine check --strict $(DIST)/*

migrate: venv
	@$(PY) manage.py migrate --noinput -v0

# The web app on the embedded default (SQLite, in-process executor): the playground at
# http://127.0.0.1:8000/playground/ (a local superuser is created on first start; its
# password is printed once).
run: migrate
	@$(PY) manage.py agent_bootstrap --url http://127.0.0.1:8000
	@$(PY) manage.py runserver 127.0.0.1:8000

# A worker (with the scheduler) that starts again by itself whenever it exits. Needs REDIS_URL.
# WORKER=rqworker (the default: a forked process per run) or WORKER=agent_worker (many runs per
# process). In production: a process manager (README, "Supervise workers").
WORKER ?= rqworker
worker: migrate
	@test -n "$$REDIS_URL" || { echo "make worker: set REDIS_URL (e.g. redis://127.0.0.1:6379/0)" >&2; exit 2; }
	@bash scripts/worker.sh $(WORKER) default

# A demo run streamed live in this terminal; the command that cancels it is printed first. A
# cancelled demo (agent_run's exit 3, Ctrl-C or that command) is a demo that worked: exit 0.
demo: migrate
	@$(PY) manage.py agent_run "Work out (17 + 25) * 3, tell me the time, then wait a little." \
		--tool calculator --tool current_time --tool sleep || [ $$? -eq 3 ]

# The test matrix (tests/conftest.py says what each tier holds): the whole suite once, on
# PostgreSQL; beside it, the SQLite tier (what behaves differently by database, and one
# end-to-end smoke per surface). Each has its own test database, Redis db and pytest cache; its
# output is shown whole when it ends. Markers select by need: -m "not processes", "not browser".
# The PostgreSQL half runs as three shards, each on a test database and Redis db of its own: the
# unit and integration tests, and the end-to-end tests (real processes, servers and a browser:
# mostly waiting on them) in two halves, the second after the SQLite tier in its slot. Their
# waits overlap, so the whole suite takes about the time of its longest slot.
E2E_PG_URL ?= postgres://postgres@127.0.0.1:5432/nrllm_agents_e2e
E2E_REDIS_URL ?= redis://127.0.0.1:6379/10
E2E_B_PG_URL ?= postgres://postgres@127.0.0.1:5432/nrllm_agents_e2e_b
E2E_B_REDIS_URL ?= redis://127.0.0.1:6379/11
# the halves: workers, MCP servers, the install, traces, commands and cross-process cancels; the
# browser, the protocols and HTTP
E2E_A := tests/e2e/workers tests/e2e/mcp tests/e2e/install tests/e2e/observability tests/e2e/management tests/e2e/live
E2E_B := $(filter-out $(E2E_A),$(patsubst %/,%,$(sort $(dir $(wildcard tests/e2e/*/__init__.py)))))
test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target test-postgres-e2e-a test-postgres-rest test-sqlite-then-e2e-b

test-postgres-e2e: venv
	DATABASE_URL=$(E2E_PG_URL) NRLLM_TEST_REDIS_URL=$(E2E_REDIS_URL) $(PY) -m pytest -o cache_dir=.pytest_cache/e2e tests/e2e $(PYTEST_ARGS)

test-postgres-e2e-a: venv
	DATABASE_URL=$(E2E_PG_URL) NRLLM_TEST_REDIS_URL=$(E2E_REDIS_URL) $(PY) -m pytest -o cache_dir=.pytest_cache/e2e $(E2E_A) $(PYTEST_ARGS)

test-postgres-e2e-b: venv
	DATABASE_URL=$(E2E_B_PG_URL) NRLLM_TEST_REDIS_URL=$(E2E_B_REDIS_URL) $(PY) -m pytest -o cache_dir=.pytest_cache/e2e-b $(E2E_B) $(PYTEST_ARGS)

# One slot of `make test`: the SQLite tier, then the second half of the end-to-end tests (both
# run, whatever the first answered; the slot fails if either did)
test-sqlite-then-e2e-b: venv
	@status=0; $(MAKE) --no-print-directory test-sqlite || status=1; \
		$(MAKE) --no-print-directory test-postgres-e2e-b || status=1; exit $$status

test-postgres-rest: venv
	DATABASE_URL=$(PG_URL) NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest tests/unit tests/integration $(PYTEST_ARGS)

# The unit tier and the store, on PostgreSQL: a couple of minutes, for the inner loop.
test-fast: venv
	DATABASE_URL=$(PG_URL) NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest tests/unit tests/integration/store $(PYTEST_ARGS)

# ruff (lint and format), mypy on the whole package (strict on domain/ and store/) and the docs
# built strictly (a broken link or a missing page fails); .ci/run runs it first
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy nrllm_agents
	@$(MAKE) --no-print-directory docs

# the manual (docs/, MkDocs Material) into an ignored folder; `$(VENV)/bin/mkdocs serve` to read it live
docs: venv
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir .site

test-postgres: venv
	DATABASE_URL=$(PG_URL) NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest $(PYTEST_ARGS)

test-sqlite: venv
	DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 NRLLM_TEST_REDIS_URL=$(SQLITE_TEST_REDIS_URL) NRLLM_TEST_TIER=sqlite \
		$(PY) -m pytest -o cache_dir=.pytest_cache/sqlite $(PYTEST_ARGS)

# Line coverage of the store and the runtime by the tests of those floors (tests/unit,
# tests/integration/store, tests/integration/runtime), not through HTTP, commands or workers.
# On PostgreSQL, so the prepared statements count too; not part of `make test`, which stays lean.
coverage-modules: venv
	DATABASE_URL=$(PG_URL) NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest tests/unit tests/integration/store tests/integration/runtime \
		--cov=nrllm_agents.store --cov=nrllm_agents.runtime \
		--cov-report=term-missing $(PYTEST_ARGS)

# The oldest supported stack: Python 3.11 with Django 5.2 LTS (the unit tier, and the integration
# tests of the store, the runtime and the surfaces, on PostgreSQL),
# on a test database and a Redis db of its own, so it can run beside `make test` (.ci/run does).
COMPAT_VENV ?= .venv-django52
COMPAT_PG_URL ?= postgres://postgres@127.0.0.1:5432/nrllm_agents_compat
COMPAT_REDIS_URL ?= redis://127.0.0.1:6379/13
# (The commands' tests are left to the main stack: each starts manage.py processes, and a command's
# parsing and output do not depend on Django's version; startup's checks and deploy settings do.)
DJANGO52_TESTS ?= tests/unit tests/integration/store tests/integration/runtime tests/integration/startup \
	tests/integration/api tests/integration/web tests/integration/admin
COMPAT_LOCK := locks/py311-django52.txt
# The older stack runs the same tests, each race repeated at most this often and the slow soaks
# left out: the main stack repeats the races in full and runs the soaks; this tier shows that
# the same code behaves the same on Django 5.2 and Python 3.11.
COMPAT_RACE_ROUNDS ?= 20
COMPAT_PYTHON ?= $(firstword $(wildcard $(shell pyenv root 2>/dev/null)/versions/3.11*/bin/python3) python3.11)
test-django52:
	@test -x $(COMPAT_VENV)/bin/python || $(COMPAT_PYTHON) -m venv $(COMPAT_VENV)
	@$(COMPAT_VENV)/bin/python -c "import sys; assert sys.version_info[:2] == (3, 11), sys.version"
	@$(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check -r $(COMPAT_LOCK)
	@$(COMPAT_VENV)/bin/python -m pip install -q --disable-pip-version-check --no-deps -e .
	@$(COMPAT_VENV)/bin/python -c "import django; assert django.VERSION[:2] == (5, 2), django.__version__"
	DATABASE_URL=$(COMPAT_PG_URL) NRLLM_TEST_REDIS_URL=$(COMPAT_REDIS_URL) NRLLM_RACE_ROUNDS_CAP=$(COMPAT_RACE_ROUNDS) \
		$(COMPAT_VENV)/bin/python -m pytest -o cache_dir=.pytest_cache/django52 -m "not slow" $(DJANGO52_TESTS) $(PYTEST_ARGS)

BENCH_REDIS_URL ?= redis://127.0.0.1:6379/12
bench: venv
	DATABASE_URL=$(PG_URL) $(PY) bench/step_overhead.py
	DATABASE_URL=$(PG_URL) $(PY) bench/cancel_op.py
	DATABASE_URL=$(PG_URL) $(PY) bench/enqueue_first_step.py --redis-url $(BENCH_REDIS_URL)
	DATABASE_URL=$(PG_URL) $(PY) bench/cancel_latency.py --redis-url $(BENCH_REDIS_URL)
	DATABASE_URL=$(PG_URL) $(PY) bench/bulk_cancel.py
	DATABASE_URL=$(PG_URL) $(PY) bench/mcp_cancel.py
	DATABASE_URL=$(PG_URL) $(PY) bench/scale.py --redis-url $(BENCH_REDIS_URL) --pgbouncer

clean:
	rm -rf $(VENV) $(COMPAT_VENV) test-db.sqlite3* .pytest_cache
