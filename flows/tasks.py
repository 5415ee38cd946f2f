"""Prefect tasks around the stages: retries on infrastructure faults, compile caching, the per-GPU lock.

Stages know nothing of Prefect; these wrappers only declare resilience and where the stage runs.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import torch
from prefect import task
from prefect.cache_policies import NO_CACHE

from flows.gpu_lock import gpu_lock
from stages import generate
from stages.contracts import (
    BenchmarkRequest,
    BenchmarkResult,
    CompileRequest,
    CompileResult,
    GenerateRequest,
    GenerateResult,
    VerifyRequest,
    VerifyResult,
)
from stages.errors import InfrastructureError
from stages.executor import Mode, run_stage


def infrastructure_only(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a task only when an infrastructure fault failed it; candidate faults are data, not retried."""
    try:
        state.result()
    except InfrastructureError:
        return True
    except Exception:
        return False
    return False


@cache
def toolchain_fingerprint() -> str:
    parts = [str(torch.__version__)]
    try:
        import triton

        parts.append(triton.__version__)
    except ImportError:
        parts.append("no-triton")
    nvcc = shutil.which("nvcc")
    if nvcc:
        parts.append(subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip()[-60:])
    return "|".join(parts)


def compile_cache_key(context: Any, parameters: dict[str, Any]) -> str:
    """Everything that determines a compile's output: source, backend, arch, toolchain, problem shapes, and
    the blob directory its artifacts live in (a cached result must point at blobs that exist)."""
    req: CompileRequest = parameters["req"]
    problem = req.problem.source_sha256 if req.problem else "-"
    text = "\n".join([req.candidate.backend, req.candidate.source, req.arch, toolchain_fingerprint(), problem,
                      req.blob_dir])
    return "compile-" + hashlib.sha256(text.encode()).hexdigest()


RETRY: dict[str, Any] = dict(retries=2, retry_delay_seconds=[2, 10], retry_jitter_factor=0.5,
                             retry_condition_fn=infrastructure_only)


@task(name="generate", cache_policy=NO_CACHE, **RETRY)
def generate_task(req: GenerateRequest) -> GenerateResult:
    return generate.run(req)


@task(name="compile", cache_key_fn=compile_cache_key, persist_result=True, **RETRY)
def compile_task(req: CompileRequest, mode: Mode) -> CompileResult:
    return run_stage("compile", req, mode)  # type: ignore[return-value]


@task(name="verify", cache_policy=NO_CACHE, **RETRY)
def verify_task(req: VerifyRequest, mode: Mode) -> VerifyResult:
    return run_stage("verify", req, mode)  # type: ignore[return-value]


@task(name="benchmark", cache_policy=NO_CACHE, **RETRY)  # never cached: every timing is measured afresh
def benchmark_task(req: BenchmarkRequest, mode: Mode, store_root: str) -> BenchmarkResult:
    with gpu_lock(Path(store_root), req.device):
        return run_stage("benchmark", req, mode)  # type: ignore[return-value]
