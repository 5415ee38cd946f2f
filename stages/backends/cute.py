"""CuTe C++ candidates: load_inline CUDA on the CUTLASS/CuTe headers, compiled here like the cuda backend.

Everything is the cuda backend's (stages/backends/cuda.py: load_inline recorded, each source built by nvcc for the
request's arch, sm_90a by default so wgmma/TMA code compiles; PTX, cubin, SASS and ptxas resources kept), plus the
CUTLASS include directory that kernelflow.stages.backends.cutlass finds (the nvidia-cutlass wheel, or $CUTLASS_PATH), the same function
a candidate calls for its own load_inline on the GPU worker. -std=c++17 and --expt-relaxed-constexpr, which CuTe
needs, are already on every cuda-backend nvcc line (the latter is one of torch's COMMON_NVCC_FLAGS, as on the GPU).
With the headers here, a missing cute/ or cutlass/ header is the candidate's error, not this machine's limit.
"""

from __future__ import annotations

from kernelflow.stages.backends import cuda, result
from kernelflow.stages.backends.cutlass import include_dirs
from kernelflow.stages.contracts import CompileRequest, CompileResult

LIBRARY_HEADERS = tuple(h for h in cuda.LIBRARY_HEADERS if h not in ("cute/", "cutlass/"))


def compile(req: CompileRequest) -> CompileResult:
    try:
        dirs = include_dirs()
    except FileNotFoundError as e:
        return result(req, status="failed", failure_kind="unavailable", message=f"{e}: cute backend off")
    return cuda.compile(req, include_dirs=dirs, library_headers=LIBRARY_HEADERS)
