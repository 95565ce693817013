# Every target makes its own virtual environment; nothing is assumed on the machine but python3.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DATA ?= data
HOST ?= 127.0.0.1
PORT ?= 5552
MEGA_PORT ?= 5553
RSIO_PORT ?= 5554
SBP_PORT ?= 5555

.PHONY: up test test-fast test-twins lint bench soak chart images clean help

help:
	@echo "make up     - install and serve a broker on $(HOST):$(PORT) (MEGA on 127.0.0.1:$(MEGA_PORT), Reactive Streams IO on 127.0.0.1:$(RSIO_PORT), SBP on 127.0.0.1:$(SBP_PORT)), data in ./$(DATA) (Ctrl-C stops)"
	@echo "make test   - install everything the tests use and run them all, on $(TEST_WORKERS) pytest-xdist workers (TEST_WORKERS=N; PYTEST_ARGS=\"-n 0\": one process)"
	@echo "make test-twins - the codec and storage tests on the C modules' Python twins (STREAMLET_NO_C=1; part of make test)"
	@echo "make test-fast - the tests that start no process and are not slow: pytest -m 'not process and not slow' on 2 workers (no broker, CLI, node, Spark)"
	@echo "make lint   - ruff, mypy, the import contracts (.importlinter) and no import cycle (.ci/cycles.py)"
	@echo "make chart  - the Helm chart packaged as helm package makes it (CRD symlinks read): dist/streamlet-<version>.tgz"
	@echo "make images - build the broker, operator and Spark images as $(REGISTRY)/<name>:$(VERSION) with $(ENGINE) (ENGINE=docker|podman, IMAGE_ARGS: more build flags)"
	@echo "make bench  - side-by-side benchmark against RabbitMQ (installs it as root if missing); results in bench/results/ (UPDATE_DOCS=1: also docs/performance.md)"
	@echo "make soak   - the long hardening runs: fuzz, 10,000 connections, kill -9 (docs/reliability.md)"

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The broker alone: no operator, no Spark.
$(VENV)/.installed-core: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	bash .ci/install-system-deps
	$(PY) -m pip install --quiet -e ".[operator,spark,dev]"
	touch $@

up: $(VENV)/.installed-core
	$(VENV)/bin/streamlet serve --host $(HOST) --port $(PORT) --mega-port $(MEGA_PORT) --rsio-port $(RSIO_PORT) --sbp-port $(SBP_PORT) --data-dir $(DATA)

# pytest-xdist: $(TEST_WORKERS) workers (most tests wait on a broker; on 2 cores 6 workers took
# 6 min but starved the failover and move scenarios' timing about one run in three, 4 keep it); --dist loadfile: a module's tests on one worker (its module-scoped broker starts once),
# tests/spark/ as one module, the longest handed out first (tests/conftest.py).
# PYTEST_ARGS="-n 0": one process.
# PYTHONDONTWRITEBYTECODE emptied: pytest keeps its assertion-rewritten test modules in __pycache__.
TEST_WORKERS ?= 4
PYTEST := PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -p no:cacheprovider
test: $(STAMP) test-twins
	$(PYTEST) -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

# The C modules' Python twins, once: the codec and storage tests with every C module off
# (STREAMLET_NO_C, streamlet/native.py); the rest of the suite runs the C modules.
TWIN_TESTS := tests/rabbitmq tests/wire tests/sbp/test_sbp_codec.py tests/sbp/test_sbp_flat.py \
	tests/sbp/test_sbp_appends.py tests/sbp/test_sbp_reader.py tests/storage tests/mega/test_mega_runs.py
test-twins: $(STAMP)
	STREAMLET_NO_C=1 $(PYTEST) -m "not process and not slow" $(TWIN_TESTS)

# two workers: in-memory tests use a core each; the collection each worker repeats (3 s) is
# less than the half of the run it saves
test-fast: $(STAMP)
	$(PYTEST) -m "not process and not slow" -n 2 --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check broker_image operator spark-on-k8s tests bench .ci
	$(VENV)/bin/mypy broker_image/streamlet operator/streamlet_operator spark-on-k8s/streamlet_spark spark-on-k8s/jobs bench tests .ci
	$(VENV)/bin/lint-imports --no-cache  # the layers: .importlinter
	$(PY) .ci/cycles.py streamlet streamlet_operator streamlet_spark  # no import cycle, type-only imports included
	$(PY) .ci/house_rules.py broker_image operator spark-on-k8s tests bench .ci  # no issue numbers
	$(PY) .ci/house_rules.py --docstrings 10 broker_image operator spark-on-k8s tests bench .ci  # module docstrings: the contract

# Side by side with RabbitMQ; results in bench/results/ (latest.json, performance.png) only.
# UPDATE_DOCS=1 also rewrites the results section of docs/performance.md and docs/performance.png.
# Needs no root unless RabbitMQ is missing: bench.run installs Debian's rabbitmq-server with
# apt-get (root only); without root and without RabbitMQ, streamlet runs alone (a note says so).
RABBITMQ_SERVER := /usr/lib/rabbitmq/bin/rabbitmq-server
BENCH_OUT := $(if $(UPDATE_DOCS),--plot docs/performance.png --update-doc docs/performance.md,--plot bench/results/performance.png)
bench: $(VENV)/.installed-core
	$(PY) -m pip install --quiet -e ".[bench]"
	@only=; if [ ! -x $(RABBITMQ_SERVER) ] && [ "$$(id -u)" != 0 ]; then \
	  echo "make bench: RabbitMQ is not installed and installing it (apt-get install rabbitmq-server) needs root: streamlet alone (install it, or run make bench as root, to compare)"; \
	  only="--only streamlet"; fi; \
	set -x; $(PY) -m bench.run --json bench/results/latest.json $(BENCH_OUT) $$only $(BENCH_ARGS)

# Fuzz (1,000,000 frames), 10,000 held connections, 10 kill -9 rounds against one broker on
# loopback; prints its figures, exits 1 if a guarantee broke. SOAK_ARGS="--help" lists the knobs.
soak: $(VENV)/.installed-core
	$(PY) -m bench.soak $(SOAK_ARGS)

# The chart archive, by Helm's own library (helm-python-sdk; no helm binary needed): the CRDs
# under charts/streamlet/crds are symlinks to crds/, packaged as their targets' contents
# (tests/chart/test_package.py renders the archive).
chart: $(STAMP)
	$(PY) -c "import helm_python; helm_python.disable_logging(); print(helm_python.package('charts/streamlet', destination='dist'))"

# The three images, tagged with pyproject.toml's version; podman where it is installed, else
# docker. Needs no venv. IMAGE_ARGS: more build flags, e.g. "--pull=never --network host" where
# the bases are local (docs/development.md#the-images).
ENGINE ?= $(shell command -v podman >/dev/null && echo podman || echo docker)
VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
REGISTRY ?= ghcr.io/streamlet
images:
	$(ENGINE) build $(IMAGE_ARGS) -f broker_image/Dockerfile -t $(REGISTRY)/broker:$(VERSION) .
	$(ENGINE) build $(IMAGE_ARGS) -f operator/Dockerfile -t $(REGISTRY)/operator:$(VERSION) .
	$(ENGINE) build $(IMAGE_ARGS) -f spark-on-k8s/Dockerfile -t $(REGISTRY)/spark:$(VERSION) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
