# The two commands a newcomer needs are `make demo` and `make test`; both build .venv first.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip install --quiet --disable-pip-version-check -c constraints.txt
STAMP := $(VENV)/.installed
PYPROJECTS := $(wildcard schemas/pyproject.toml libs/*/pyproject.toml services/*/pyproject.toml)

.PHONY: venv tools demo test test-under-load test-chart-run test-faults fuzz lint schemas bench-bus bench-placement bench-telemetry bench-loop bench-health bench-forecast bench-headroom bench-energy bench-extender bench-fairness bench-soak clean up down

venv: $(STAMP)

$(STAMP): constraints.txt requirements-dev.txt $(PYPROJECTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@echo "installing pinned dependencies into $(VENV) (first run takes a few minutes)"
	@$(PIP) hatchling
	@$(PIP) --no-build-isolation -r requirements-dev.txt
	@touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/gpuaware demo

# two pytest-xdist workers, tests spread one by one (those sharing a module's fixture kept together);
# the slowest tests are listed at the end with their durations; every wall-clock ceiling in the suite is
# scaled by the machine's measured slowdown (printed in the header)
TEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest tests -n $(TEST_WORKERS) --dist loadscope --durations=20 --durations-min=5
test: $(STAMP) tools
	$(PYTEST)

# the same suite beside a CPU hog on every core: what a user's busy laptop does to it
test-under-load: $(STAMP) tools
	$(PY) tests/under_load.py -- $(PYTEST)

# Prometheus and Alertmanager (promtool, amtool) for the observe tests and Chromium for the report's
# screenshot test, from Debian's packages, when this runs as root with apt-get; otherwise those tests
# skip (or leave that check out) and say why. Never fails the build.
tools:
	@if command -v promtool >/dev/null && command -v prometheus >/dev/null && command -v prometheus-alertmanager >/dev/null \
		&& command -v chromium >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing prometheus, prometheus-alertmanager and chromium (Debian packages) for the observe tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			prometheus prometheus-alertmanager chromium >/dev/null) || echo "could not install them: the tests that need them skip"; \
	else echo "prometheus/alertmanager/chromium absent and no root apt-get: the tests that need them skip"; fi

# the chart's workloads (rendered by Helm with ci/processes-values.yaml) started as processes against the
# embedded NATS and PostgreSQL: a short replay decided, bound and recorded, a GPU fault's alert fired and
# resolved in Alertmanager, every dashboard panel with rows; writes bench/results/chart-run.json
test-chart-run: $(STAMP) tools
	$(PY) tests/integration/chart_run.py

# the fault scenarios of `make test` alone (kill -9 of services and servers, outages, a lost NATS node)
test-faults: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadscope -m faults tests

# the fuzz properties of `make test`, run longer (5,000 examples each; the CLI fuzz, a process per draw
# under a 2 GiB address-space limit, 150 command lines per sub-command: CLI_FUZZ_EXAMPLES=N to change)
CLI_FUZZ_EXAMPLES ?= 150
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz GPUAWARE_CLI_FUZZ_EXAMPLES=$(CLI_FUZZ_EXAMPLES) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope tests/fuzz tests/k8s/test_k8s_fuzz.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(PY) tests/lint/import_layers.py
	$(PY) tests/lint/typecheck.py

schemas: $(STAMP)
	$(PY) -m gpuaware.schemas.generate schemas/generated

bench-bus: $(STAMP)
	$(PY) bench/bus.py

bench-placement: $(STAMP)
	$(PY) bench/placement.py

bench-telemetry: $(STAMP)
	$(PY) bench/telemetry.py

bench-loop: $(STAMP)
	$(PY) bench/loop.py

bench-health: $(STAMP)
	$(PY) bench/health.py

bench-forecast: $(STAMP)
	$(PY) bench/forecast.py

# the forecast head-room on and off on the demo's generator workload, in virtual time (a few minutes)
bench-headroom: $(STAMP)
	$(PY) bench/headroom.py

bench-energy: $(STAMP)
	$(PY) bench/energy.py

bench-fairness: $(STAMP)
	$(PY) bench/fairness.py

bench-extender: $(STAMP)
	$(PY) bench/extender.py

# 10 minutes: the loop at 500 pods/s and telemetry at 100,000 samples/s together, memory of every process
bench-soak: $(STAMP)
	$(PY) bench/soak.py

# on a GPU node: the telemetry agent on NVML for 60 s (every metric of the contract present or explained),
# checkpoint save and restore of about 1 GB on CUDA, the forecast step; writes bench/results/gpu-check.json
# (without an NVIDIA GPU: that it skipped, and why; exit 0)
.PHONY: gpu-check
gpu-check: $(STAMP)
	$(PY) bench/gpu_check.py

up: $(STAMP)
	$(VENV)/bin/gpuaware up

down: $(STAMP)
	$(VENV)/bin/gpuaware down

clean:
	rm -rf $(VENV) .gpuaware
