# kernelflow's front door. `make demo` and `make test` do all set-up on a fresh machine.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# Exact pins for what would otherwise pull a multi-GB CUDA build: the CPU wheel on our machines.
TORCH   ?= torch==2.13.0
TRITON  ?= triton==3.6.0
# kernelflow's CLI sets the same Prefect defaults itself (kernelflow/cli.py kernelflow_defaults); exported here
# for what runs without it (the tests, scripts/)
export PREFECT_HOME ?= $(CURDIR)/.kernelflow/prefect
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_LOGGING_LEVEL ?= INFO
# the flow's own progress lines stay visible; per-task state lines do not
export PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL ?= WARNING
# The demo runs the real optimize flow end to end. On a GPU: up to 6 candidates of the elementwise family on the GPU
# shapes, 5 s of timing per shape, within 150 s of wall time (each candidate there takes ~90 s at the default 30 s of
# timing per shape: budget 6 alone would be a 10-minute demo; with every family the first candidate on a GPU would be
# torch.compile's own code, the floor, and the template that beats it would not fit in the 150 s).
# Without one, kept to about 2 minutes on 2 cores: 3 candidates of the elementwise family (Inductor's candidates take
# ~40 s each on the CPU, and asking which problems Inductor takes ~10-20 s more), 1 s of timing per shape.
DEMO_PROBLEM  ?= problems/17_elementwise_chain.py
DEMO_GPU_ARGS ?= --budget 6 --families elementwise --timing-budget 5 --wall-time 150
DEMO_CPU_ARGS ?= --budget 3 --families elementwise --timing-budget 1

# Stage worker images (containers/README.md). Their bases come from Docker Hub where it is reachable; where it is not
# (our machines, CI), `make base-image` builds a Debian base offline and CPU_BASE=kernelflow-base:bookworm uses it.
CPU_BASE    ?= python:3.11-slim-bookworm
GPU_BASE    ?= nvidia/cuda:13.0.1-devel-ubuntu24.04
OFFLINE_BASE := kernelflow-base:bookworm
IMAGE_TAG   ?= latest

.PHONY: install demo test test-fast lint typecheck bench-gpu bench-agreement clean images image-cpu image-gpu base-image docker-engine

install: $(STAMP)
$(STAMP): pyproject.toml
	@echo "installing kernelflow and its dependencies (torch, triton, prefect, ...) into $(VENV): 2-3 minutes, quiet until done"
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH)" "$(TRITON)"
	$(BIN)/pip install -q -e ".[dev]"
	touch $(STAMP)

demo: install
	$(BIN)/kernelflow problems validate $(DEMO_PROBLEM)
	@gpu=$$($(BIN)/python -c "import torch; print(int(torch.cuda.is_available()))") || { \
	  echo "make demo: $(BIN)/python cannot import torch (its error is above); 'make install' reinstalls" >&2; exit 1; }; \
	if [ "$$gpu" = 1 ]; then \
	  args="$(DEMO_GPU_ARGS)"; next="$$DEMO_NEXT_GPU"; else args="$(DEMO_CPU_ARGS)"; next="$$DEMO_NEXT_CPU"; fi; \
	  echo "$(BIN)/kernelflow optimize $(DEMO_PROBLEM) $$args"; \
	  $(BIN)/kernelflow optimize $(DEMO_PROBLEM) $$args && printf '%s\n' "$$next"

define DEMO_NEXT_CPU

What happened: the whole pipeline ran on this CPU: kernels proposed, compiled, verified against the reference,
timed beside eager PyTorch, profiled, and every artifact recorded in the store (./runs by default). The timings
are Triton's interpreter on a CPU, not GPU timings: a candidate slower than eager here says nothing about a GPU.
To try next:
  on a GPU host, `make demo` (there: $(DEMO_GPU_ARGS) on the GPU shapes, eager and torch.compile as baselines)
  judge a kernel of your own, e.g. the example Triton softmax:
    $(BIN)/kernelflow verify problems/01_softmax.py prompts/examples/triton_softmax.py
  $(BIN)/kernelflow show latest     # this run again, from the artifacts alone
endef
define DEMO_NEXT_GPU

What happened: kernels proposed, compiled, verified against the reference, timed beside eager PyTorch and
torch.compile on this GPU, profiled, and every artifact recorded in the store (./runs by default).
To try next:
  $(BIN)/kernelflow export $(basename $(notdir $(DEMO_PROBLEM))) --out my_kernel   # the best kernel as a drop-in package, when one won
  $(BIN)/kernelflow optimize problems/01_softmax.py --budget 8    # another problem of problems/
  $(BIN)/kernelflow show latest                                     # this run again, from the artifacts alone
endef
export DEMO_NEXT_CPU DEMO_NEXT_GPU

# The browser tests (tests/artifacts/test_report.py, tests/kernelflow/test_ui.py) drive Debian's chromium through Playwright (never
# `playwright install`: browser downloads are blocked here). Installed with apt when missing and this runs as root;
# without it the tests skip with the reason, or fail under CI=true (docs/REPORTS.md).
CHROMIUM ?= /usr/bin/chromium
export KERNELFLOW_CHROMIUM := $(CHROMIUM)
.PHONY: browser
browser:
	@test -x $(CHROMIUM) || { [ "$$(id -u)" = 0 ] && command -v apt-get > /dev/null \
	  && apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
	  > /dev/null; } || echo "no $(CHROMIUM) and no apt-get install as root here: the browser tests will skip (fail under CI=true)"

# The docker executor's tests run real stage containers: a Docker engine (installed and started when missing, as
# root) and the CPU image of this checkout on the offline Debian base. Where those cannot be had, the tests skip
# with the reason, or fail under CI=true (containers/README.md).
.PHONY: docker-test-image
docker-test-image: install
	@{ containers/docker-engine.sh && $(MAKE) --no-print-directory base-image image-cpu CPU_BASE=$(OFFLINE_BASE); } \
	  || echo "no Docker engine or worker image here: the docker executor's tests will skip (fail under CI=true)"

# Three pytest-xdist workers for CI's 2 cores: the tests wait on subprocess stages, Prefect servers and containers,
# so two workers leave about a quarter of the CPU idle and three keep both cores busy (docs/LOG.md). --dist
# loadfile: each test file runs whole on one worker, in its order, so module-scoped fixtures (a Prefect server, an
# optimize run) start once and the docker tests' engine-wide checks see only their own containers.
# PYTEST_WORKERS=0 runs it in one process.
PYTEST_WORKERS ?= 3
test: install browser docker-test-image
	$(BIN)/pytest -q -x --durations=10 -n $(PYTEST_WORKERS) --dist loadfile

# The edit-test loop: every test not marked slow (pyproject.toml: end-to-end runs, containers, browsers, sm_90a
# builds); no browser or docker set-up. `make test` runs everything and is what CI runs.
test-fast: install
	$(BIN)/pytest -q -x -n $(PYTEST_WORKERS) --dist loadfile -m "not slow"

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# Resumable: each problem's result lands in bench/results/ as it finishes; a rerun skips the finished ones.
BENCH_ARGS ?= --skip-done
bench-gpu: install
	$(BIN)/python scripts/bench_gpu.py $(BENCH_ARGS)

# Independent agreement (docs/METHOD.md): each best kernel of bench/results/, exported, timed by our re-implementation of
# KernelBench's procedure against kernelflow's median (±5%), one process per problem; resumable like bench-gpu: each
# record lands in bench/agreement/, a rerun skips the final ones. `scripts/agreement.py --render` prints the table.
AGREEMENT_ARGS ?= --skip-done
bench-agreement: install
	$(BIN)/python scripts/agreement.py $(AGREEMENT_ARGS)

# BENCHMARKS.md, rendered from the records (bench/results, bench/sol-floors.json, bench/agreement); no GPU, no Prefect.
# tests/scripts/test_benchmarks_page.py fails when the committed page is not this output.
.PHONY: benchmarks-page
benchmarks-page: install
	$(BIN)/python scripts/benchmarks_page.py --out BENCHMARKS.md

images: image-cpu image-gpu

# The image installs from a wheelhouse that this machine's pip fills (containers/wheelhouse.sh): the pinned torch and
# triton, the project's dependencies, kernelflow's own wheel. The CPU image's build reaches no index at all.
image-cpu image-gpu: install
	containers/wheelhouse.sh $(BIN)/pip $(if $(filter image-cpu,$@),$(CPU_BASE),$(GPU_BASE)) "$(TORCH)" "$(TRITON)"
	docker build -q -f containers/Dockerfile -t kernelflow-$(@:image-%=%):$(IMAGE_TAG) \
	  --build-arg BASE_IMAGE=$(if $(filter image-cpu,$@),$(CPU_BASE) --build-arg OFFLINE=1,$(GPU_BASE)) \
	  --build-arg TORCH="$(TORCH)" --build-arg TRITON="$(TRITON)" \
	  --build-arg CODE_FINGERPRINT=$$($(BIN)/python -c "from kernelflow.stages.executors.docker import code_fingerprint as f; print(f())") .

base-image:
	docker image inspect $(OFFLINE_BASE) > /dev/null 2>&1 || containers/base-image.sh $(OFFLINE_BASE)

# A Docker engine on this machine (installed and started when missing): what CI's docker tests run on.
docker-engine:
	containers/docker-engine.sh

clean:
	rm -rf $(VENV) runs .kernelflow .pytest_cache .mypy_cache .ruff_cache
