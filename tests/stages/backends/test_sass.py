"""Static SASS statistics: a hand-written Hopper listing, then real nvcc and Triton AOT builds for sm_90a."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages.backends.harvest import find_tool
from kernelflow.stages.backends.sass import SassStats, sass_stats
from kernelflow.stages.contracts import Candidate, CompileRequest, Origin
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import load_problem

FIXTURES = Path(__file__).parents[2] / "fixtures"
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="no nvcc: CUDA compiles cannot run")

SNIPPET = """
	code for sm_90
		Function : _Z4gemmPKfPf
	.headerflags	@"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                              /* 0x00000a00ff017b82 */
                                                                                       /* 0x000e620000000800 */
        /*0010*/                   LDG.E.128 R4, desc[UR8][R2.64] ;                    /* 0x0000000802047981 */
        /*0020*/                   LDG.E.128.CONSTANT R8, desc[UR8][R2.64+0x10] ;      /* 0x0000100802087981 */
        /*0030*/                   LDG.E.U8 R12, desc[UR8][R14.64] ;                   /* 0x000000080e0c7981 */
        /*0040*/              @!PT LDS RZ, [RZ] ;                                      /* 0x00000000fffff984 */
        /*0050*/                   HGMMA.64x8x16.F32 R24, gdesc[UR4], RZ, !UPT, gsb0 ;  /* 0x00000000041879f0 */
        /*0060*/                   HMMA.16816.F32 R8, R4, R8, RZ ;                     /* 0x000000080408723c */
        /*0070*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                       /* 0x0000000000007b1d */
        /*0080*/                   FFMA R4, R4, R5, R6 ;                               /* 0x0000000504047223 */
        /*0090*/                   STL [R1], R4 ;                                      /* 0x0000000401007387 */
        /*00a0*/               @P0 BRA 0x60 ;                                          /* 0x0000000000840947 */
        /*00b0*/                   STG.E.128 desc[UR8][R2.64], R24 ;                   /* 0x0000001802007986 */
        /*00c0*/                   EXIT ;                                              /* 0x000000000000794d */
        /*00d0*/                   BRA 0xd0;                                           /* 0xfffffffc00fc7947 */
        /*00e0*/                   NOP;                                                /* 0x0000000000007918 */
"""


def test_sass_snippet_counts_tensor_cores_and_128_bit_loads():
    [(name, s)] = sass_stats(SNIPPET).items()
    assert name == "_Z4gemmPKfPf" and s.uses_tensor_cores and s.uses_local_memory
    assert s == SassStats(
        instructions_total=12, mma_sync_instructions=1, wgmma_instructions=1, tensor_core_instructions=2,
        global_loads_8bit=1, global_loads_128bit=2, global_loads_total=3, global_load_width_bits_mean=88.0,
        global_stores_128bit=1, global_stores_total=1, local_stores=1, bar_sync_instructions=1,
        barrier_instructions=1, ffma_instructions=1, fp32_arith_instructions=1, branch_instructions=1,
        predicated_branch_instructions=1)


def test_no_global_loads_means_no_mean_width():
    assert sass_stats("Function : k\n        /*0000*/   EXIT ;")["k"].global_load_width_bits_mean is None


def _compile(tmp_path: Path, name: str, backend: str, with_problem: bool) -> dict:
    source = (FIXTURES / "candidates" / f"{name}.py").read_text()
    candidate = Candidate.make("add", backend, source, Origin(kind="user", proposer="fixture"))
    problem = load_problem(FIXTURES / "problems" / "add.py") if with_problem else None
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "w"), candidate=candidate,
                             problem=problem))
    assert (res.status, res.mode) == ("ok", "ahead_of_time"), res.message
    return {k.name: k.sass for k in res.kernels}


@pytest.mark.slow
@needs_nvcc
def test_cuda_relu_stats_have_global_traffic_and_no_tensor_cores_or_local_memory(tmp_path):
    [(name, s)] = _compile(tmp_path, "cuda_relu", "cuda", with_problem=False).items()
    assert name.startswith("_Z11relu_kernel") and s is not None
    assert s["global_loads_total"] >= 1 and s["global_stores_total"] >= 1 and s["global_loads_32bit"] >= 1
    assert (s["tensor_core_instructions"], s["local_loads"], s["local_stores"]) == (0, 0, 0)


@pytest.mark.slow
@needs_nvcc
def test_cuda_float4_copy_counts_128_bit_global_loads(tmp_path):
    [s] = _compile(tmp_path, "cuda_vec4_copy", "cuda", with_problem=False).values()
    assert s is not None and s["global_loads_128bit"] >= 1 and s["global_stores_128bit"] >= 1
    assert s["global_load_width_bits_mean"] == 128.0


@pytest.mark.slow
def test_triton_add_stats_from_ahead_of_time_build(tmp_path):
    s = _compile(tmp_path, "triton_add", "triton", with_problem=True)["add_kernel"]
    assert s is not None and s["global_loads_total"] >= 2 and s["global_stores_total"] >= 1
    assert (s["tensor_core_instructions"], s["local_loads"] + s["local_stores"]) == (0, 0)
    assert s["fp32_arith_instructions"] >= 1
