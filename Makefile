# The README's commands. `make run` and `make test` are all a new machine needs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test test-quick system-packages lint install worker webhooks-worker beat inbound submission migrate browser-test soak soak-direct nodes manage start

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet '.[dev,bench]'
	touch $@

install: $(BIN)/.installed

# Embedded defaults: SQLite under var/, in-process dispatch, file outbox under var/outbox/.
# config/settings.py reads .env (real environment variables win), and so does config/start.py, so every
# command below, `.venv/bin/python manage.py …` and `make start` share the settings in it.
run: install .env
	$(BIN)/python manage.py migrate --verbosity 0
	$(BIN)/python manage.py bootstrap_demo
	$(BIN)/python manage.py runserver 127.0.0.1:8000

# The first `make run` writes development settings; production copies .env.example instead.
.env:
	printf '# Written by make run: development settings (see .env.example for production).\nDEBUG=true\n' > $@

# Any management command with the settings of .env: make manage ARGS="createsuperuser"
manage: install
	$(BIN)/python manage.py $(ARGS)

# The Procfile's processes together (config/start.py reads .env; the web on 8000 as with `make run`):
# a process that ends is named and the others keep running; Ctrl-C stops them all.
start: install .env
	$(BIN)/python -m config.start

migrate: install
	$(BIN)/python manage.py migrate

# Benchmarks (docs/benchmarks.md): need DATABASE_URL (a PostgreSQL server; the bench creates
# and drops its own database on it) and REDIS_URL. Results go to bench/results/.
.PHONY: bench bench-smoke
# Then the nodes-apart fault test at full size (bench/nodes.py, 5 minutes), which needs root.
bench: install system-packages
	$(BIN)/python -m bench all
	# Webhook replay at issue 44's size: 10,000 events during an outage, each received once per webhook-id.
	REPLAY_EVENTS=10000 $(BIN)/pytest -p no:cacheprovider -q tests/webhooks/test_replay.py -k outage
	@if [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory nodes; else echo "bench: nodes skipped (needs root)"; fi

# Every scenario at a tiny size, in seconds: checks the harness, not the speed.
bench-smoke: install system-packages
	$(BIN)/python -m bench all --tiny

# The JS client's type checker (TypeScript, a devDependency of clients/js), pinned by its lock file.
JS_TOOLS := clients/js/node_modules/.installed
$(JS_TOOLS): clients/js/package.json clients/js/package-lock.json
	cd clients/js && npm ci --no-audit --no-fund --loglevel=error
	touch $@

# ruff; mypy on the product (pyproject.toml: Django and DRF stubs, every function typed in the
# services, selectors, dispatch and inbound); the layer rule (lint-imports: pyproject.toml's import
# contracts, docs/architecture.md); mypy --strict on the Python client; tsc --strict over the JS
# client's sources against its .d.ts files (clients/js/tsconfig.json); no import cycle between
# server modules; every path named in a comment exists; and the docs check.
lint: install $(JS_TOOLS)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	cd clients/python && $(abspath $(BIN))/mypy --strict
	cd clients/js && npx --no-install tsc -p . --noEmit --checkJs --strict
	# A database of its own, so the migration history check never looks for one that is not there yet.
	DJANGO_SETTINGS_MODULE=tests.settings DATABASE_URL=sqlite:///var/lint.sqlite3 $(BIN)/python manage.py makemigrations --check --dry-run
	DJANGO_SETTINGS_MODULE=tests.settings $(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	# No two modules of the server import each other round a loop (grimp's graph: tests/import_cycles.py).
	$(BIN)/python -m tests.import_cycles
	# Every file path named in a comment or a docstring exists (tests/comment_paths.py).
	$(BIN)/python -m tests.comment_paths
	# Every Markdown file renders as written: fences closed, relative links and anchors found (docs/development.md).
	$(BIN)/python -m tests.docs_check

# The whole suite needs a real PostgreSQL and Redis (Celery workers, the soak, the benchmark smoke
# run): the local servers unless DATABASE_URL / REDIS_URL say otherwise. pytest-xdist runs it in
# TEST_WORKERS processes, a test file each at a time, each worker on a test database and a Redis database of
# its own (tests/settings.py, tests/harness/template_db.py; docs/development.md has the figures).
TEST_WORKERS ?= 4
PYTEST_PARALLEL = $(BIN)/pytest --numprocesses $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder
test: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/mailservice
test: export REDIS_URL ?= redis://127.0.0.1:6379/0
test: install system-packages lint
	$(PYTEST_PARALLEL)

# The edit-test loop: every test that starts no process of its own (no server, command or browser;
# tests/harness/plugin.py fails one that does unmarked), against PostgreSQL and Redis only. No lint.
test-quick: export DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/mailservice
test-quick: export REDIS_URL ?= redis://127.0.0.1:6379/0
test-quick: install
	$(PYTEST_PARALLEL) -m "not live and not browser and not soak and not namespaces"

# The Debian programs the suite starts (deploy/system-packages.txt): installed when missing, as root;
# otherwise one line names the command that would.
system-packages:
	@sh deploy/install-system-packages

# The MX for verified domains and the return-path domain (bounces, complaints).
inbound: install
	$(BIN)/python manage.py run_inbound_smtp --host $${INBOUND_HOST:-127.0.0.1} --port $${INBOUND_PORT:-2525}

# SMTP submission for applications (docs/submission.md): STARTTLS with MAILSERVICE_TLS_CERT_FILE/KEY_FILE,
# or in development (.env's DEBUG=true) with a self-signed certificate it makes in var/tls/.
submission: install .env
	$(BIN)/python manage.py run_submission_smtp --host $${SUBMISSION_HOST:-127.0.0.1} --port $${SUBMISSION_PORT:-2587}

worker: install
	$(BIN)/celery -A config worker --pool threads --concurrency 5 --loglevel INFO

# Webhook requests only (docs/webhooks.md): a slow endpoint never holds a dispatch thread.
webhooks-worker: install
	$(BIN)/celery -A config worker -Q webhooks --pool threads --concurrency 16 -n webhooks@%h --loglevel INFO

beat: install
	$(BIN)/celery -A config beat --loglevel INFO

# The console's browser tests (headless Chromium); screenshots land in var/screenshots/.
browser-test: install
	$(BIN)/pytest -m browser

# Chaos soak (bench/soak.py): SOAK_SECONDS of load (default 300) while workers, Redis, PostgreSQL,
# the relay and a web process break. It starts private PostgreSQL and Redis instances (never the
# shared ones) and needs the PostgreSQL server binaries (POSTGRES_BIN_DIR, default /usr/lib/postgresql/15/bin).
SOAK_SECONDS ?= 300
soak: install system-packages
	SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python bench/soak.py --output bench/results/soak-latest.md
# The same with direct delivery (mx://): the sink is the recipients' MX, DNS fails and times out too.
soak-direct: install system-packages
	SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python bench/soak.py --direct --output bench/results/soak-direct-latest.md

# Nodes apart (bench/nodes.py): NODES_SECONDS of load (default 300) through nginx to three application
# nodes and a database node, each in a network namespace, while one is cut off from the database, one
# gets latency and loss, a worker is SIGKILLed and PostgreSQL restarts. Needs root, iproute2 and iptables.
NODES_SECONDS ?= 300
nodes: install
	NODES_SECONDS=$(NODES_SECONDS) $(BIN)/python bench/nodes.py --output bench/results/nodes-latest.md
