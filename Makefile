# One task runner for people and CI alike. Every target creates the virtual
# environment first, so `make run` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=
# The hot path, compiled with mypyc next to its sources (setup.py); rebuilt whenever
# one of them changes, since a compiled module is imported in preference to its
# source. JOBS_COMPILE=0 removes them: plain Python throughout.
HOT_PATH := $(shell sed 's/\#.*//' compiled_modules.txt)
COMPILED := $(VENV)/.compiled

.PHONY: venv compile run test test-unit lint bench kafka-fetch kafka-start kafka-stop clean proto browser promtool

# The editable install itself stays plain Python (JOBS_COMPILE=0); `compile` below
# builds the extensions in place, the one way that works for a source checkout.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	JOBS_COMPILE=0 $(PY) -m pip install -q -e '.[test,dev,bench,outbox]'
	touch $(STAMP)

venv: $(STAMP)

# The built modules are touched: one whose C did not change (a per-module shim, or a
# comment edited) is copied from build/ with its old time, and the tests' staleness
# check would refuse it.
$(COMPILED): $(STAMP) setup.py compiled_modules.txt $(HOT_PATH)
	find leasekeeper workers schemas jobcore -name '*.so' -delete
	rm -f *__mypyc*.so
	@if [ "$${JOBS_COMPILE:-1}" = 0 ]; then \
	  echo "JOBS_COMPILE=0: the hot path runs as plain Python"; \
	else \
	  echo "mypyc: compiling the hot path to C, a few minutes the first time (JOBS_COMPILE=0 make run skips it)"; \
	  $(PY) setup.py -q build_ext --inplace >/dev/null; \
	  find leasekeeper workers schemas jobcore -name '*.so' -exec touch {} +; \
	fi
	touch $(COMPILED)

## Compile the hot path (mypyc) after editing one of compiled_modules.txt's modules.
compile: $(COMPILED)

## Start local Kafka and the demo system (Ctrl-C stops everything).
run: $(COMPILED)
	$(PY) -m devtools.demo

## Headless Chromium and its driver from Debian's packages, for the dashboard's browser
## test (no browser download is possible or wanted). Needs root; a no-op when present.
browser:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "chromium and chromedriver present"; \
	else \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    chromium chromium-driver; \
	fi

## promtool from Debian's prometheus package, which validates and unit-tests the example
## alert rules (docs/alerts). Needs root; a no-op when present.
promtool:
	@if command -v promtool >/dev/null; then \
	  echo "promtool present"; \
	else \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
	    --no-install-recommends prometheus; \
	fi

## Run every test suite (unit, integration, acceptance) against a real Kafka
## the suite starts itself, or KAFKA_BOOTSTRAP when set.
# The tests that promise "no Kafka, no Java, no network" (the testing package and the
# framework examples) run first where none of them exist (devtools/offline_tests.py),
# then the rest of the suite without them. PYTEST_ARGS runs what it names, plainly.
OFFLINE_TESTS := tests/testing $(wildcard examples/*/tests)

test: $(COMPILED)
ifeq ($(strip $(PYTEST_ARGS)),)
	$(PY) -m devtools.offline_tests $(OFFLINE_TESTS)
	$(PY) -m devtools.localkafka fetch
	$(PY) -m devtools.localregistry fetch
	$(PY) -m pytest $(addprefix --ignore=,$(OFFLINE_TESTS))
else
	$(PY) -m devtools.localkafka fetch
	$(PY) -m devtools.localregistry fetch
	$(PY) -m pytest $(PYTEST_ARGS)
endif

test-unit: $(COMPILED)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

## Benchmarks side by side (results in benchmarks/results/, see BENCHMARKS.md):
## SCENARIO=drain|raw|share|peers|latency|recovery|memory|noisy|micro (or 1-9), QUICK=1,
## BENCH_ARGS for anything else (e.g. BENCH_ARGS="--no-pin").
bench: $(COMPILED)
	$(PY) -m benchmarks $(if $(SCENARIO),--scenario $(SCENARIO)) $(if $(QUICK),--quick) $(BENCH_ARGS)

kafka-fetch: $(STAMP)
	$(PY) -m devtools.localkafka fetch

kafka-start: $(STAMP)
	$(PY) -m devtools.localkafka start

kafka-stop: $(STAMP)
	$(PY) -m devtools.localkafka stop

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
	find leasekeeper workers schemas jobcore -name '*.so' -delete
	rm -f *__mypyc*.so

## Regenerate the gRPC stubs after editing schemas/worker.proto.
proto: $(STAMP)
	cd schemas && PATH=$(CURDIR)/$(VENV)/bin:$$PATH ../$(PY) -m grpc_tools.protoc -I. \
	  --python_out=. --grpc_python_out=. --mypy_out=. --mypy_grpc_out=. worker.proto
	sed -i 's/^import worker_pb2 as/from schemas import worker_pb2 as/' schemas/worker_pb2_grpc.py schemas/worker_pb2_grpc.pyi
