# Magnetar — the two commands a user needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# One virtualenv, two install levels: the runtime (what `magnetar standalone` needs) and the
# dev level (runtime plus the test, lint and Spark extras). Installing the dev level also
# marks the runtime level done, so `make test` then `make run` installs nothing.
RUNTIME_STAMP := $(VENV)/.installed-runtime
DEV_STAMP     := $(VENV)/.installed-dev
PROTO_DIR := src/magnetar/protocol

.PHONY: run test lint proto system-deps interop-deps venv clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# The project (editable) with its runtime dependencies only.
# setup.py and the C files: the optional compiled codec and record encoders, rebuilt in
# place when they change.
CFRAME_SRC := setup.py $(PROTO_DIR)/_cframe.c $(PROTO_DIR)/_crecords.c

$(RUNTIME_STAMP): pyproject.toml Makefile $(CFRAME_SRC) | $(PY)
	$(PY) -m pip install --quiet -e .
	@touch $(RUNTIME_STAMP)

# The project (editable) with the dev and Spark extras; includes the runtime level.
$(DEV_STAMP): pyproject.toml Makefile $(CFRAME_SRC) | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $(DEV_STAMP) $(RUNTIME_STAMP)

venv: $(DEV_STAMP)

# Start a standalone Magnetar (embedded metadata store, bookie, broker) on this machine;
# ARGS go to it: make run ARGS="--http-port 8081"
ARGS ?=
run: $(RUNTIME_STAMP)
	$(VENV)/bin/magnetar standalone $(ARGS)

# Debian packages the tests need (Java 17 and ZooKeeper), installed when missing and root.
system-deps:
	@bash scripts/ensure-system-deps.sh

# The independent protocol clients the interop tests drive (pulsar-flex, from npm), as locked.
INTEROP_STAMP := tests/interop/node_modules/.installed
$(INTEROP_STAMP): tests/interop/package.json tests/interop/package-lock.json | system-deps
	npm ci --prefix tests/interop --no-audit --no-fund --loglevel=error
	@touch $(INTEROP_STAMP)

interop-deps: $(INTEROP_STAMP)

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy src

# Everything the suite needs, then the whole suite, TEST_WORKERS test packages at a time
# (pytest-xdist; the tests mostly wait on the processes they start).
TEST_WORKERS ?= 2
test: $(DEV_STAMP) system-deps interop-deps lint
	$(PY) -m pytest -n $(TEST_WORKERS) $(PYTEST_ARGS)

# Regenerate the protobuf modules from our .proto files (the output is checked in).
proto: $(DEV_STAMP)
	$(PY) -m grpc_tools.protoc -I$(PROTO_DIR) --python_out=$(PROTO_DIR)/generated \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
		--mypy_out=$(PROTO_DIR)/generated $(PROTO_DIR)/PulsarApi.proto $(PROTO_DIR)/PulsarMarkers.proto
	$(PY) -m grpc_tools.protoc -Isrc/magnetar/bookie_protocol --python_out=src/magnetar/bookie_protocol --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy --mypy_out=src/magnetar/bookie_protocol src/magnetar/bookie_protocol/bookie.proto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache tests/interop/node_modules
