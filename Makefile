# Magnetar — the two commands a user needs are `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTO_DIR := src/magnetar/protocol

.PHONY: run test lint proto system-deps venv clean

# Create the virtualenv and install the project (editable) with its dev tools.
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,spark]'
	@touch $(STAMP)

venv: $(STAMP)

# Start a standalone Magnetar (embedded metadata store, bookie, broker) on this machine.
run: $(STAMP)
	$(VENV)/bin/magnetar standalone

# Debian packages the tests need (Java 17 and ZooKeeper), installed when missing and root.
system-deps:
	@bash scripts/ensure-system-deps.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/mypy src

# Everything the suite needs, then the whole suite.
test: $(STAMP) system-deps lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Regenerate the protobuf modules from our .proto files (the output is checked in).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I$(PROTO_DIR) --python_out=$(PROTO_DIR)/generated \
		--plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy \
		--mypy_out=$(PROTO_DIR)/generated $(PROTO_DIR)/PulsarApi.proto
	$(PY) -m grpc_tools.protoc -Isrc/magnetar/bookie/protocol --python_out=src/magnetar/bookie/protocol --plugin=protoc-gen-mypy=$(VENV)/bin/protoc-gen-mypy --mypy_out=src/magnetar/bookie/protocol src/magnetar/bookie/protocol/bookie.proto

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
