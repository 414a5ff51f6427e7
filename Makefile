# The README's commands. `make run` and `make test` are all a new machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
export DJANGO_SETTINGS_MODULE ?= config.settings

.PHONY: run test lint install worker beat inbound migrate

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet '.[dev,bench]'
	touch $@

install: $(BIN)/.installed

# Embedded defaults: SQLite under var/, in-process dispatch, file outbox under var/outbox/.
run: install
	DEBUG=true $(BIN)/python manage.py migrate --verbosity 0
	DEBUG=true $(BIN)/python manage.py bootstrap_demo
	DEBUG=true $(BIN)/python manage.py runserver 127.0.0.1:8000

migrate: install
	$(BIN)/python manage.py migrate

# Benchmarks (README, "Benchmarks"): need DATABASE_URL (a PostgreSQL server; the bench creates
# and drops its own database on it) and REDIS_URL. Results go to bench/results/.
.PHONY: bench bench-smoke
bench: install
	$(BIN)/python -m bench all

# Every scenario at a tiny size, in seconds: checks the harness, not the speed.
bench-smoke: install
	$(BIN)/python -m bench all --tiny

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python manage.py makemigrations --check --dry-run
	DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null

test: install lint
	$(BIN)/pytest

worker: install
	$(BIN)/celery -A config worker --loglevel INFO

beat: install
	$(BIN)/celery -A config beat --loglevel INFO
