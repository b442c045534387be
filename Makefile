# Two commands: `make run` sets everything up and runs the system;
# `make test` sets everything up and runs the whole test suite.
# Both are safe to run again.

SHELL := /bin/bash
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.requirements-$(shell sha1sum requirements.txt 2>/dev/null | cut -c1-12)
TEST_STAMP := $(VENV)/.test-requirements-$(shell cat requirements.txt tests/requirements.txt 2>/dev/null | sha1sum | cut -c1-12)
PYTEST_ARGS ?=
# make test's pytest-xdist workers (tests/workers.py keeps them apart: a Redis, a
# network range and Spark per worker); 0: one process
TEST_WORKERS ?= 3
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-p tests.workers -n $(TEST_WORKERS) --dist loadfile)

export PATH := $(CURDIR)/$(BIN):$(PATH)

.PHONY: conformance conformance-runners run test test-postgres test-python-front test-fast setup setup-run system-packages test-packages venv test-venv redis node-client migrate admin admin-token seed demo-data lint typecheck clean

run: setup-run migrate admin demo-data admin-token
	@$(BIN)/python manage.py print_urls
	@exec $(BIN)/python -m console.core.supervise

# Both phases always run (a failure in the first does not hide the second's
# results); the last line says how each ended, and make fails if either did.
# When the set-up, lint, typecheck or the native tests fail, neither runs and
# the last line says so. A private Redis or PostgreSQL that this run started
# (nothing answered before it where REDIS_URL and TEST_POSTGRES_URL point, as
# console/core/ensure_redis.py and ensure_postgres.py read them: `python3
# tests/support.py was-running redis|postgres`) is stopped at the end; one that
# was already running is left (as is any when that cannot be told).
test:
	@py=$(BIN)/python; [ -x $$py ] || py=python3; \
	redis_was=$$($$py tests/support.py was-running redis 2>/dev/null || echo 1); \
	pg_was=$$($$py tests/support.py was-running postgres 2>/dev/null || echo 1); \
	main=0; pg=0; ran=1; \
	if $(MAKE) --no-print-directory setup conformance-runners lint typecheck native-test; then \
	  BROKER_TESTS_STRICT=1 $(BIN)/python -m pytest $(XDIST) --durations=25 $(PYTEST_ARGS) || main=$$?; \
	  $(MAKE) --no-print-directory test-postgres || pg=$$?; \
	else ran=0; fi; \
	if [ -x $(BIN)/python ]; then \
	  [ "$$redis_was" = 1 ] || $(BIN)/python -m console.core.ensure_redis --stop; \
	  [ "$$pg_was" = 1 ] || $(BIN)/python -m console.core.ensure_postgres --stop; \
	fi; \
	if [ $$ran = 0 ]; then \
	  echo "make test: set-up, lint, typecheck or native tests failed (see above): neither the main suite nor the PostgreSQL console suite ran"; \
	  exit 2; \
	fi; \
	echo "make test: main suite exit $$main, PostgreSQL console suite exit $$pg"; \
	[ $$main -eq 0 ] && [ $$pg -eq 0 ]

# The console suite once more on PostgreSQL, the production database: the server
# at TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/postgres) when
# it answers, else a private one under var/postgres (console/core/ensure_postgres.py).
# Spark, service and slow tests ran above; they do not depend on the database.
# This run reaches each test's store through a node's admin API (CONSOLE_VIA_ADMIN),
# as a console deployed apart from its node does (BROKER_ADMIN_URL).
test-postgres: test-venv
	@url=$$($(BIN)/python -m console.core.ensure_postgres) && echo "console suite on $$url" && \
	DATABASE_URL=$$url CONSOLE_VIA_ADMIN=1 BROKER_TESTS_STRICT=1 $(BIN)/python -m pytest tests/console -q $(XDIST) \
	  -m "not spark and not services and not slow" $(PYTEST_ARGS)

# The endpoint suite and the conformance runners on the grpc.aio front (the
# default is the native front where it is built): every `serve` a test starts.
test-python-front: setup conformance-runners
	GRPC_FRONT=python ENDPOINT_FRONT=python $(BIN)/python -m pytest tests/broker_core/endpoint tests/conformance $(PYTEST_ARGS)

# Everything but the crash, browser, Spark, protocol and service groups.
test-fast: test-venv
	$(BIN)/python -m pytest -m "not slow and not crash and not browser and not spark and not protocol and not services" $(PYTEST_ARGS)

# What running needs (make run); setup adds what the tests need (make test).
setup-run: system-packages venv redis
setup: setup-run test-venv test-packages node-client native

# apt-get only what is missing. Running needs redis-server, a Java 17+ runtime
# (Spark) and Python; the tests also need Chromium, Node.js, a JDK with Maven,
# Go, PostgreSQL and nginx (make run installs none of those; nginx is in
# /usr/sbin, off an ordinary user's PATH, hence the second look).
APT_INSTALL = if [ -n "$$missing" ]; then \
	  echo "installing system packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

system-packages:
	@missing=""; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	{ command -v java >/dev/null && java -version 2>&1 | grep -Eq 'version "(1[7-9]|2[0-9])'; } || missing="$$missing openjdk-17-jre-headless"; \
	command -v $(PY) >/dev/null || command -v python3 >/dev/null || missing="$$missing python3 python3-venv"; \
	$(APT_INSTALL)

test-packages:
	@missing=""; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	command -v javac >/dev/null || missing="$$missing openjdk-17-jdk-headless"; \
	command -v mvn >/dev/null || missing="$$missing maven"; \
	command -v go >/dev/null || missing="$$missing golang-go"; \
	{ command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; } || missing="$$missing postgresql"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	command -v etcd >/dev/null || missing="$$missing etcd-server"; \
	{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || missing="$$missing nginx-light"; \
	$(APT_INSTALL)

venv: $(STAMP)

$(STAMP): requirements.txt
	@command -v $(PY) >/dev/null && py=$(PY) || py=python3; \
	[ -x $(BIN)/python ] || $$py -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	@rm -f $(VENV)/.requirements-*; touch $@

# The test tools on top (tests/requirements.txt): make test, never make run.
test-venv: $(TEST_STAMP)

$(TEST_STAMP): $(STAMP) tests/requirements.txt
	$(BIN)/python -m pip install -q -r tests/requirements.txt
	@rm -f $(VENV)/.test-requirements-*; touch $@

# The official Node.js RocketMQ client, for the protocol tests beside the Python one.
NODE_CLIENT := rocketmq-client-nodejs@1.0.8
node-client:
	@[ -f var/node/node_modules/rocketmq-client-nodejs/package.json ] || \
	  npm install --silent --no-audit --no-fund --prefix var/node $(NODE_CLIENT)

# The conformance runners of the official Java and Go clients (Maven Central,
# the Go module proxy), built once; the Python and Node.js ones need no build.
conformance-runners: test-venv node-client
	@bash tests/conformance/runners/java/build.sh
	@bash tests/conformance/runners/go/build.sh

# The scenarios with the four official clients against Apache RocketMQ (its jars
# fetched once from Maven Central into var/peers) and against our endpoint, the
# two compared field by field: the table goes into docs/compat.md, Apache's
# observations into tests/conformance/apache-results.json (what `make test`
# compares our endpoint with). Fails on a difference differences.json does not
# explain.
CONFORMANCE_LANGS ?= python,node,java,go
conformance: setup conformance-runners
	$(BIN)/python tests/conformance/run.py --target apache --parallel --langs $(CONFORMANCE_LANGS) --out var/conformance/apache.json
	$(BIN)/python tests/conformance/run.py --target ours --parallel --langs $(CONFORMANCE_LANGS) --out var/conformance/ours.json
	cp var/conformance/apache.json tests/conformance/apache-results.json
	$(BIN)/python tests/conformance/compare.py var/conformance/apache.json var/conformance/ours.json \
	  --langs $(CONFORMANCE_LANGS) --markdown var/conformance/table.md; rc=$$?; \
	  $(BIN)/python tests/conformance/publish.py var/conformance/table.md docs/compat.md; exit $$rc

# Make sure Redis answers at REDIS_URL; start a private one under var/ if not.
redis: venv
	@$(BIN)/python -m console.core.ensure_redis

migrate: venv
	$(BIN)/python manage.py migrate --noinput

admin: venv
	@$(BIN)/python manage.py ensure_admin

# The token of the node's admin API (serve --admin-listen), through which the
# console's web process manages the store (BROKER_ADMIN_URL): made once, 0600.
admin-token:
	@f="$${CLUSTER_ADMIN_TOKEN_FILE:-var/admin_token}"; [ -s "$$f" ] || \
	  { mkdir -p "$$(dirname "$$f")" && (umask 077; $(BIN)/python -c 'import secrets; print(secrets.token_urlsafe(32))' > "$$f") && echo "admin API token: $$f"; }

seed: migrate
	$(BIN)/python manage.py seed_demo

# First run: fill an empty store with demo traffic so the console is never
# empty on first look. SEED_DEMO=0 skips it.
demo-data: migrate
	@store="$${BROKER_STORE_DIR:-var/store}"; \
	if [ "$${SEED_DEMO:-1}" != 0 ] && [ -z "$$(ls -A "$$store/commitlog" 2>/dev/null)" ]; then \
	  echo "empty store: seeding demo traffic (SEED_DEMO=0 to skip)"; \
	  $(BIN)/python manage.py seed_demo; \
	fi

lint: test-venv
	$(BIN)/ruff check broker_core console tests bench
	$(BIN)/ruff format --check broker_core console tests bench

typecheck: test-venv
	$(BIN)/mypy broker_core

clean:
	rm -rf var/store var/tmp

# Bench peers (docs/peers.md), never part of `make test`: RabbitMQ at
# 127.0.0.1:5672 and NATS JetStream at 127.0.0.1:4222 for bench/grpc.py (private
# instances under var/peers/, installed with apt-get when missing; a server that
# already answers there is used and left alone), and Apache RocketMQ's jars from
# Maven Central for the conformance peer (bench/peers/rocketmq.py).
.PHONY: bench-peers bench-peers-stop apache-rocketmq
bench-peers: venv apache-rocketmq
	$(BIN)/python -m pip install -q -r requirements-bench.txt
	python3 bench/peers/services.py start all

bench-peers-stop:
	python3 bench/peers/services.py stop all
	python3 bench/peers/rocketmq.py stop

apache-rocketmq:
	python3 bench/peers/rocketmq.py fetch

# The native gRPC front (docs/grpc.md, "Native front"): C++ on Debian's gRPC
# (libgrpc++-dev) and pybind11, built into broker_core/_native*.so for the
# venv's Python; `serve --front native` uses it. Safe to run again: apt-get
# only what is missing, compile only what changed. native-test: its GoogleTest
# tests (Debian's libgtest-dev, cmake and ctest), no Python involved.
# A plain ``.so`` (CPython imports it as well as a tagged one): the suffix
# cannot come from the venv's Python, which a fresh clone does not have yet
# when make reads this file (the module was built as ``_native`` and never
# imported: CI14).
NATIVE_SO := broker_core/_native.so
NATIVE_BUILD := native/build
NATIVE_CXXFLAGS = -O2 -g -std=c++17 -fPIC -Wall -Wextra -Wno-unused-parameter $$(pkg-config --cflags grpc++)
NATIVE_LIBS = $$(pkg-config --libs grpc++)
.PHONY: native native-packages native-test

native: native-packages $(NATIVE_SO)

# Only when there is no venv at all (a shared venv is left as it is).
$(BIN)/python:
	$(MAKE) --no-print-directory venv

native-packages:
	@missing=""; \
	for p in g++ pkg-config libgrpc++-dev pybind11-dev; do \
	  dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; \
	done; \
	$(APT_INSTALL)

$(NATIVE_BUILD)/%.o: native/%.cc native/front.h
	@mkdir -p $(NATIVE_BUILD)
	g++ $(NATIVE_CXXFLAGS) -c $< -o $@

$(NATIVE_BUILD)/module.o: native/module.cc native/front.h | $(BIN)/python
	@mkdir -p $(NATIVE_BUILD)
	g++ $(NATIVE_CXXFLAGS) -fvisibility=hidden -I$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["include"])') -c $< -o $@

$(NATIVE_SO): $(NATIVE_BUILD)/front.o $(NATIVE_BUILD)/module.o
	g++ -shared -o $@ $^ $(NATIVE_LIBS)
	@rm -f broker_core/_native.cpython-*.so broker_core/_native  # older builds

native-test: native-packages
	@missing=""; \
	for p in libgtest-dev cmake; do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	$(APT_INSTALL)
	cmake -S native -B $(NATIVE_BUILD)/test -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	cmake --build $(NATIVE_BUILD)/test -j2
	cd $(NATIVE_BUILD)/test && ctest --output-on-failure
