"""Prefect tasks around the stages: retries on infrastructure faults, compile caching, the per-GPU lock.

Stages know nothing of Prefect; these wrappers only declare resilience and where the stage runs.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from kernelflow.flows.gpu_lock import gpu_lock
from kernelflow.stages import generate, refine
from kernelflow.stages.backends import toolchain
from kernelflow.stages.contracts import (
    BenchmarkRequest,
    BenchmarkResult,
    CompileRequest,
    CompileResult,
    Feedback,
    GenerateRequest,
    GenerateResult,
    ProfileRequest,
    ProfileResult,
    VerifyRequest,
    VerifyResult,
)
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors.run import Mode, run_stage
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
    """Everything that determines a compile's output: source, backend, arch, toolchain, problem shapes, and
    the blob directory its artifacts live in (a cached result must point at blobs that exist)."""
    req: CompileRequest = parameters["req"]
    problem = req.problem.source_sha256 if req.problem else "-"
    text = "\n".join([req.candidate.backend, req.candidate.source, req.arch, toolchain_fingerprint(), problem,
                      req.blob_dir])
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
    """(candidate or baseline, its binaries, workload, problem, GPU, ncu version, toolchain): a candidate is its
    compiled binaries and source; a baseline (no binaries) is the reference under this torch."""
    req: ProfileRequest = parameters["req"]
    compiled: CompileResult | None = parameters["compiled"]
    binaries = sorted(compiled.blobs.values()) if compiled else []
    text = "\n".join([req.subject_id, req.contender, *binaries, str(req.workload), req.problem.source_sha256,
                      req.blob_dir, profiler_fingerprint(), toolchain_fingerprint()])
    return "profile-" + hashlib.sha256(text.encode()).hexdigest()


RETRY: dict[str, Any] = dict(retries=2, retry_delay_seconds=[2, 10], retry_jitter_factor=0.5,
                             retry_condition_fn=infrastructure_only)


@task(name="generate", cache_policy=NO_CACHE, **RETRY)
def generate_task(req: GenerateRequest) -> GenerateResult:
    return generate.run(req)


# Cached results are read back from storage, not kept in memory: Prefect's in-memory copy (an LRU of 1000 per result
# store, held by the enclosing flow) grew a campaign's flow process by ~7 kB per compiled candidate.
@task(name="compile", cache_key_fn=compile_cache_key, persist_result=True, cache_result_in_memory=False, **RETRY)
def compile_task(req: CompileRequest, mode: Mode) -> CompileResult:
    return run_stage("compile", req, mode)  # type: ignore[return-value]


@task(name="verify", cache_policy=NO_CACHE, **RETRY)
def verify_task(req: VerifyRequest, mode: Mode) -> VerifyResult:
    return run_stage("verify", req, mode)  # type: ignore[return-value]


@task(name="profile", cache_key_fn=profile_cache_key, persist_result=True, cache_result_in_memory=False, **RETRY)
def profile_task(req: ProfileRequest, mode: Mode, store_root: str, compiled: CompileResult | None) -> ProfileResult:
    with gpu_lock(Path(store_root), req.device):  # counters and timing need the GPU to themselves
        return run_stage("profile", req, mode)  # type: ignore[return-value]


@task(name="refine", cache_policy=NO_CACHE, **RETRY)
def refine_task(req: RefineRequest) -> Feedback:
    return refine.run(req)


@task(name="benchmark", cache_policy=NO_CACHE, **RETRY)  # never cached: every timing is measured afresh
def benchmark_task(req: BenchmarkRequest, mode: Mode, store_root: str) -> BenchmarkResult:
    with gpu_lock(Path(store_root), req.device):
        return run_stage("benchmark", req, mode)  # type: ignore[return-value]
