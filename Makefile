# NPU Lab Portal. `make demo` runs the embedded portal; `make test` runs the whole suite.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
VAR := var
# Checkov (the policy scan in tests/deploy) pins heavy dependencies: its own virtualenv.
CHECKOV_VENV := .venv-checkov

.PHONY: checkov controlplane demo settings-doc test test-fast test-sqlite bench bench-asgi bench-classstart bench-kube bench-metrics bench-requests chaos load lint venv clean messages compilemessages

$(VENV)/.installed-runtime: requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt $(VENV)/.installed-runtime
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed-dev

## checkov: the policy scanner tests/deploy/test_policy_scan.py runs, in its own virtualenv
$(CHECKOV_VENV)/.installed: requirements-checkov.txt
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(CHECKOV_VENV)/bin/python -m pip install --quiet -r requirements-checkov.txt
	touch $@

checkov: $(CHECKOV_VENV)/.installed

## controlplane: kube-apiserver, kube-scheduler, kube-controller-manager, kubectl and etcd, built from
## tools/controlplane/go.mod with Go into ~/.cache/npu-lab-portal/controlplane/<versions>/bin (once per
## version, ~7 min cold on two cores; a second run checks the stamp and takes a second). tests/kube needs them.
controlplane:
	$(PYTHON) -m labs.devcluster.binaries

$(VAR)/secret_key $(VAR)/agent_token:
	mkdir -p $(VAR)
	umask 077 && $(PYTHON) -c "import secrets; print(secrets.token_urlsafe(50))" > $@

# A Fernet key (32 random bytes, url-safe base64) for the secrets encrypted at rest (labs/encryption.py).
$(VAR)/field_encryption_key:
	mkdir -p $(VAR)
	umask 077 && $(PYTHON) -c "import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())" > $@

## messages: every string marked for translation into locale/*/LC_MESSAGES/django.po, keeping the
## translations there (new strings arrive untranslated, changed ones fuzzy); then translate them.
## tests/test_catalogue.py runs this target in a copy of the repository and compares.
LOCALES := zh_Hans
# No page text lives here (hidden directories such as .venv are skipped anyway; the node agent runs
# without Django).
MESSAGES_IGNORE := .venv .venv-checkov var bench tests deploy node_modules nodeagent
messages: | $(VENV)/.installed-runtime
	env -u DJANGO_SETTINGS_MODULE $(PY) -m django makemessages $(addprefix --locale=,$(LOCALES)) \
	  --no-obsolete --no-wrap --add-location=file $(addprefix --ignore=,$(MESSAGES_IGNORE))

## compilemessages: the .mo files the portal reads (built, never committed)
MO_FILES := $(foreach locale,$(LOCALES),locale/$(locale)/LC_MESSAGES/django.mo)
compilemessages: $(MO_FILES)

# --check includes the placeholders; a literal "%" in a message that is not a format string
# carries "# xgettext:no-python-format" in the source (the "(% of one card)" labels). Without
# GNU gettext (a fresh machine), polib compiles it (tools/compile_catalogue.py).
locale/%/LC_MESSAGES/django.mo: locale/%/LC_MESSAGES/django.po | $(VENV)/.installed-runtime
	if command -v msgfmt >/dev/null; then msgfmt --check -o $@ $<; else $(PY) tools/compile_catalogue.py $< $@; fi

## demo: the embedded portal on http://127.0.0.1:8000/ (SQLite, local Redis, local JupyterLab driver)
# Redis database 1 to 15 from PORTAL_PORT (15 for 8000, 14 for 8001: two demos side by side keep
# apart; run_demo refuses a database another running demo holds) unless REDIS_URL says otherwise:
# a Redis already on 6379 is likely someone else's, using database 0. `exec`: make's SIGTERM then reaches the demo, not a shell that would
# die and leave it running.
demo: $(VENV)/.installed-runtime $(VAR)/secret_key $(VAR)/agent_token $(VAR)/field_encryption_key $(MO_FILES)
	REDIS_URL="$${REDIS_URL:-redis://127.0.0.1:6379/$$(( 15 - ($${PORTAL_PORT:-8000} % 15 + 10) % 15 ))}" \
	SECRET_KEY_FILE=$(CURDIR)/$(VAR)/secret_key LAB_AGENT_TOKEN_FILE=$(CURDIR)/$(VAR)/agent_token \
	FIELD_ENCRYPTION_KEY_FILE=$(CURDIR)/$(VAR)/field_encryption_key \
	AGENT_TOKEN_FILE=$(CURDIR)/$(VAR)/agent_token exec $(PY) manage.py run_demo

## test: ruff and the import contracts (make lint); then the whole suite against PostgreSQL, Redis, Celery, Channels and headless Chromium
## (in TEST_WORKERS processes with pytest-xdist, each with its own database, Redis number and
## var directory; a file's tests stay together; Schemathesis' generated tests run apart, after,
## as its pytest plugin collects them as one test under xdist; the launch's commit count, which
## needs its process's connection pool idle, runs alone too); then the console's and the LTI
## flows again on SQLite, the demo's database (~1 min); tests/kube runs apart, in one process, so one
## control plane serves it all (built by `make controlplane` first: a second's check once built)
TEST_WORKERS ?= 2
SQLITE_TESTS := tests/views tests/lti tests/gateway tests/test_one_of_lookup.py
test: $(VENV)/.installed-dev $(CHECKOV_VENV)/.installed $(MO_FILES) controlplane
	$(MAKE) lint
	$(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile --ignore=tests/api/test_schemathesis.py --ignore=tests/kube \
	  --ignore=tests/views/test_launch_commits.py --ignore=tests/views/test_stop_commits.py
	$(VENV)/bin/pytest tests/api/test_schemathesis.py
	$(VENV)/bin/pytest tests/views/test_launch_commits.py tests/views/test_stop_commits.py
	$(VENV)/bin/pytest tests/kube
	$(MAKE) test-sqlite

## test-sqlite: the console's pages (tests/views, the ASGI walk included) and the LTI flows on SQLite
## (the database of each run is a file in its var directory; no test uses the file the URL names)
test-sqlite: $(VENV)/.installed-dev $(MO_FILES)
	TEST_DATABASE_URL=sqlite:///test-portal.sqlite3 $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadfile $(SQLITE_TESTS)

test-fast: $(VENV)/.installed-dev $(CHECKOV_VENV)/.installed $(MO_FILES)
	$(VENV)/bin/pytest -m "not browser and not slow and not kube"

## bench: the allocation engine beside a naive reference; one allocation pass over 1,000 nodes on
## PostgreSQL; classes of 128, 512 and 1,024 on 1,000 fake nodes of the real control plane; the LMS
## roster sync of 5,000 members, twice; a class of 128 starting on the portal beside JupyterHub, on
## the simulator (and 1,024 on 8 servers, 2,048 on 16, once, with issue 32's targets and the
## portal's CPU per session) and on the real control plane (the Kubernetes driver beside KubeSpawner: 128 three
## times, 1,024 once); a simulated week of one class with the time and fairness policies and without;
## a class of 30 taking back the labs another course borrowed; the course model endpoint's gateway (added latency
## per streamed response, the rate at which its p99 doubles); the portal under Daphne, uvicorn and granian
## (PostgreSQL, Redis, npm; ~40 min, most of it the week and the control plane)
bench: $(VENV)/.installed-dev controlplane
	@began=$$(date +%s); status=0; \
	$(PY) -m bench || status=1; \
	$(PY) -m bench.pass_scale || status=1; \
	$(PY) -m bench.kube_scale || status=1; \
	$(PY) -m bench.roster_sync || status=1; \
	$(PY) -m bench.side_by_side --launches 128 --repeats 3 || status=1; \
	$(PY) -m bench.side_by_side --launches 1024,2048 --repeats 1 || status=1; \
	$(PY) -m bench.side_by_side --driver kubernetes --launches 128 --repeats 3 || status=1; \
	$(PY) -m bench.side_by_side --driver kubernetes --launches 1024 --repeats 1 || status=1; \
	$(PY) -m bench.week || status=1; \
	$(PY) -m bench.reclaim || status=1; \
	$(PY) -m bench.planner || status=1; \
	$(PY) -m bench.smaller_offer || status=1; \
	$(PY) -m bench.row_insert || status=1; \
	$(PY) -m bench.gateway || status=1; \
	$(PY) -m bench.asgi_servers || status=1; \
	echo "make bench took $$(( $$(date +%s) - began )) s"; exit $$status

## bench-classstart: the class start at 512 (4 servers) and 1,024 launches (8 servers) beside JupyterHub (~4 min)
bench-classstart: $(VENV)/.installed-dev
	@began=$$(date +%s); status=0; \
	$(PY) -m bench.side_by_side --launches 512,1024 --repeats 1 || status=1; \
	echo "make bench-classstart took $$(( $$(date +%s) - began )) s"; exit $$status

## bench-asgi: the portal's ASGI application under Daphne, uvicorn (uvloop, httptools) and granian, one process
## each: requests/s, p50/p99 and server CPU per request of a trivial view and of launch + stop, a websocket burst
## to 200 student pages; the ratio to Daphne, the load average, the responses compared (~2 min)
bench-asgi: $(VENV)/.installed-dev $(MO_FILES)
	$(PY) -m bench.asgi_servers

## bench-kube: 1,000 fake nodes x 8 cards on the real control plane; classes of 128, 512 and 1,024
## started and stopped by the lifecycle controller, with the portal's API requests per session (~11 min)
bench-kube: $(VENV)/.installed-dev controlplane
	$(PY) -m bench.kube_scale

## bench-metrics: one scrape of /metrics at 1,000 nodes, 40,000 live allocations and a history of
## 1,000,000 ended sessions on PostgreSQL (~3 min, most of it writing the data)
bench-metrics: $(VENV)/.installed-dev
	$(PY) -m bench.metrics_scale

## bench-requests: CPU time and SQL queries per request of the hot endpoints (dashboard, launch, stop, course page,
## cluster page, websocket publish and deliver), in-process on PostgreSQL, beside a trivial view as the floor (~1 min)
bench-requests: $(VENV)/.installed-dev $(MO_FILES)
	$(PY) -m bench.request_cost

## load: Locust against Daphne: 300 students (dashboard, websocket, launch and stop on the simulator), 20 instructors,
## 2 operators; the students paced to 100 launch + stop requests/s together ("--rate 0": as fast as they go), then
## 20 s unpaced for the saturation rate; rates, p50/p99 per endpoint, websocket delay, Daphne CPU per request of each
## endpoint beside a trivial view, PASS/FAIL (3-5 min; LOAD_ARGS="--quick" for 30 users, 20 s)
load: $(VENV)/.installed-dev $(MO_FILES)
	$(PY) -m bench.load $(LOAD_ARGS)

## chaos: a class launching and stopping over HTTP (Daphne, workers, beat, two agents, its own PostgreSQL and
## Redis servers) while faults land on it; per-fault table, PASS/FAIL on every target (~3-4 min;
## CHAOS_ARGS="--only redis,postgres" or "--quick" while developing)
chaos: $(VENV)/.installed-dev
	$(PY) -m bench.chaos $(CHAOS_ARGS)

## settings-doc: docs/settings.md from the settings table (portal/settings_table.py); a test fails when it is stale
settings-doc: $(VENV)/.installed-runtime
	$(PY) -m portal.settings_doc

## lint: ruff, then the import contracts in pyproject.toml (lint-imports: layers, no import circles)
lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VAR)/driver $(VAR)/static
