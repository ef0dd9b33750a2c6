# make run   - the app on the embedded default (SQLite, no Redis needed)
# make test  - the whole suite, on PostgreSQL and on SQLite (PostgreSQL and Redis must be up)

VENV ?= .venv
PY := $(VENV)/bin/python
PG_URL ?= postgres://postgres@127.0.0.1:5432/nrllm_agents
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
PYTEST_ARGS ?=

.PHONY: run test test-postgres test-sqlite venv migrate bench clean

venv:
	@bash scripts/venv.sh $(VENV)

migrate: venv
	@$(PY) manage.py migrate --noinput -v0

run: migrate
	@$(PY) manage.py agent_run "Work out (17 + 25) * 3, tell me the time, then wait a little." \
		--tool calculator --tool current_time --tool sleep

test: test-postgres test-sqlite

test-postgres: venv
	DATABASE_URL=$(PG_URL) NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest $(PYTEST_ARGS)

test-sqlite: venv
	DATABASE_URL=sqlite:///$(CURDIR)/db.sqlite3 NRLLM_TEST_REDIS_URL=$(TEST_REDIS_URL) $(PY) -m pytest $(PYTEST_ARGS)

bench: venv
	DATABASE_URL=$(PG_URL) $(PY) bench/step_overhead.py

clean:
	rm -rf $(VENV) test-db.sqlite3* .pytest_cache
