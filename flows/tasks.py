"""Prefect tasks around the stages: retries on infrastructure faults, the compile and profile caches, and each stage
call's run in the Prefect UI, named by what it is (`verify 3f2a9c1b (rowwise)`, `benchmark eager, compile`, `profile
compile`). They declare resilience only: the work is the stages' (generate and refine inline, the others through
flows/steps.py's `execute`: where the executor says, under the GPU's lock, files kept as blobs). A flow run is named
by its own id (an optimize run's, a campaign's) once the flow knows it: `name_flow_run`."""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import cache
from typing import Any

import torch
from prefect import Task, runtime, task
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext

from kernelflow.flows.steps import execute
from kernelflow.stages import generate, refine
from kernelflow.stages.backends import toolchain
from kernelflow.stages.contracts import (
    BenchmarkRequest,
    Candidate,
    CompileRequest,
    Feedback,
    GenerateRequest,
    GenerateResult,
    ProfileRequest,
    StageRequest,
    StageResult,
)
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors.run import Mode
from kernelflow.stages.refine import RefineRequest


def infrastructure_only(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only when an infrastructure fault failed it; candidate faults are data, not retried."""
    try:
        state.result()
    except InfrastructureError:
        return True
    except Exception:
        return False
    return False


def toolchain_fingerprint() -> str:
    """The compile stage's own record of its tools (torch, triton, python, nvcc), as one string."""
    return json.dumps(toolchain(), sort_keys=True)


def compile_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    """Everything that determines a compile's output: source, backend, arch, toolchain, problem shapes, and the store
    its files are kept in (a cached result must name blobs that exist)."""
    req: CompileRequest = parameters["req"]
    problem = req.problem.source_sha256 if req.problem else "-"
    text = "\n".join([req.candidate.backend, req.candidate.source, req.arch, toolchain_fingerprint(), problem,
                      parameters["store_root"]])
    return "compile-" + hashlib.sha256(text.encode()).hexdigest()


@cache
def profiler_fingerprint() -> str:
    """The GPU and the profiler a profile depends on."""
    from kernelflow.stages.measure.ncu import find_ncu, ncu_version

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    ncu = find_ncu()
    try:
        version = ncu_version(subprocess.run([ncu, "--version"], capture_output=True, text=True, timeout=60).stdout) \
            if ncu else "no-ncu"
    except (OSError, subprocess.SubprocessError) as e:
        version = f"ncu unusable: {type(e).__name__}"
    return f"{gpu}|{version}"


def profile_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    """(candidate source or baseline, workload, problem, GPU, ncu version, toolchain, store): a candidate's binaries
    follow from its source and the toolchain; a baseline is the reference under this torch."""
    req: ProfileRequest = parameters["req"]
    source = req.candidate.source if req.candidate else ""
    text = "\n".join([req.subject_id, req.contender, source, str(req.workload), req.problem.source_sha256,
                      profiler_fingerprint(), toolchain_fingerprint(), parameters["store_root"]])
    return "profile-" + hashlib.sha256(text.encode()).hexdigest()


def short(candidate: Candidate) -> str:
    """A candidate as a run name shows it: its id's first 8 characters and its family (template or proposer)."""
    return f"{candidate.id[:8]} ({candidate.origin.proposer})"


def subject(req: Any) -> str:
    """What a stage request is about: its candidate, else the baselines it times or the one it profiles or refines,
    and the workloads when it names some; a proposal's proposer and parent (`from 3f2a9c1b (llm)`, `repair of ...`)."""
    if isinstance(req, GenerateRequest):
        parent = f"{'repair of' if req.parent_failure else 'from'} {req.parent.id[:8]} " if req.parent else ""
        return f"{parent}({req.proposer})"
    candidate = getattr(req, "candidate", None)
    if candidate is not None:
        what = short(candidate)
    elif isinstance(req, BenchmarkRequest):
        what = ", ".join(req.baselines)
    elif isinstance(req, RefineRequest):
        ev = req.evidence
        what = ev.candidate_id[:8] if ev.contender == "candidate" else ev.contender
    else:
        what = getattr(req, "contender", "?")
    workloads = getattr(req, "workloads", None) or ([req.workload] if getattr(req, "workload", None) else [])
    return what + (f" on {', '.join(workloads)}" if workloads else "")


def run_name(stage: str) -> Any:
    """A stage task run's name in the Prefect UI: the stage and its subject (a callback Prefect calls with the task's
    parameters)."""
    def name(parameters: dict[str, Any]) -> str:
        return f"{stage} {subject(parameters['req'])}"

    return name


def name_flow_run(name: str) -> None:
    """The flow run in progress named `name` in the Prefect UI (a run's or a campaign's id: known only once its flow
    has begun, so a flow_run_name cannot give it). Outside a flow run, nothing."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None or runtime.flow_run.name == name:
        return
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        client.set_flow_run_name(context.flow_run.id, name)
    context.flow_run.name = name


RETRY: dict[str, Any] = dict(retries=2, retry_delay_seconds=[2, 10], retry_jitter_factor=0.5,
                             retry_condition_fn=infrastructure_only)


@task(name="generate", task_run_name=run_name("generate"), cache_policy=NO_CACHE, **RETRY)
def generate_task(req: GenerateRequest) -> GenerateResult:
    return generate.run(req)


@task(name="refine", task_run_name=run_name("refine"), cache_policy=NO_CACHE, **RETRY)
def refine_task(req: RefineRequest) -> Feedback:
    return refine.run(req)


# Cached results are read back from storage, not kept in memory: Prefect's in-memory copy (an LRU of 1000 per result
# store, held by the enclosing flow) grows a campaign's flow process by ~7 kB per compiled candidate (docs/LOG.md).
@task(name="compile", task_run_name=run_name("compile"), cache_key_fn=compile_cache_key, persist_result=True,
      cache_result_in_memory=False, **RETRY)
def compile_task(req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    return execute("compile", req, mode, store_root)


@task(name="verify", task_run_name=run_name("verify"), cache_policy=NO_CACHE, **RETRY)
def verify_task(req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    return execute("verify", req, mode, store_root)


# never cached: every timing is measured afresh
@task(name="benchmark", task_run_name=run_name("benchmark"), cache_policy=NO_CACHE, **RETRY)
def benchmark_task(req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    return execute("benchmark", req, mode, store_root)


@task(name="profile", task_run_name=run_name("profile"), cache_key_fn=profile_cache_key, persist_result=True,
      cache_result_in_memory=False, **RETRY)
def profile_task(req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    return execute("profile", req, mode, store_root)


TASKS: dict[str, Task[..., StageResult]] = {"compile": compile_task, "verify": verify_task,
                                              "benchmark": benchmark_task, "profile": profile_task}


def stage_task(name: str) -> Task[..., StageResult]:
    return TASKS[name]


def in_tasks(name: str, req: StageRequest, mode: Mode, store_root: str) -> StageResult:
    """flows/steps.py's `execute` as the stage's Prefect task (Steps.execute in a flow)."""
    return TASKS[name](req, mode, store_root)
