# kernelflow's front door. `make demo` and `make test` do all set-up on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Exact pins for what would otherwise pull a multi-GB CUDA build: the CPU wheel on our machines.
TORCH   ?= torch==2.13.0
TRITON  ?= triton==3.6.0
export PREFECT_HOME ?= $(CURDIR)/.kernelflow/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_LOGGING_LEVEL ?= INFO
# the flow's own progress lines stay visible; per-task state lines do not
export PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL ?= WARNING
DEMO_PROBLEM ?= problems/17_elementwise_chain.py
DEMO_BUDGET  ?= 6

.PHONY: install demo test lint typecheck bench-gpu clean

install: $(STAMP)
$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" "$(TRITON)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: install
	$(BIN)/kernelflow problems validate $(DEMO_PROBLEM)
	$(BIN)/kernelflow optimize $(DEMO_PROBLEM) --budget $(DEMO_BUDGET)
	$(BIN)/kernelflow show latest

test: install
	$(BIN)/pytest -q -x --durations=10

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# Resumable: each problem's result lands in bench/results/ as it finishes; a rerun skips the finished ones.
BENCH_ARGS ?= --skip-done
bench-gpu: install
	$(BIN)/python scripts/bench_gpu.py $(BENCH_ARGS)

clean:
	rm -rf $(VENV) runs .kernelflow .pytest_cache .mypy_cache .ruff_cache
