"""Refine stage and stage-one classification: class -> tools -> ordered findings -> prompt text."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages.backends.sass import sass_stats
from kernelflow.stages.contracts import KernelBinary
from kernelflow.stages.measure.bottleneck import bound_of, counters_bound
from kernelflow.stages.measure.tools import TOOLS, select
from kernelflow.stages.refine import RefineRequest, run
from tests.stages.measure.test_tools import FIRES, H200, evidence, work

SNIPPET = """
		Function : _Z9scale_rowPKfPfi
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   LDG.E R4, desc[UR8][R2.64] ;
        /*0020*/                   LDG.E R5, desc[UR8][R2.64+0x4] ;
        /*0030*/                   STL [R1], R4 ;
        /*0040*/                   LDL R6, [R1] ;
        /*0050*/                   FMUL R6, R6, R5 ;
        /*0060*/                   STG.E desc[UR8][R8.64], R6 ;
        /*0070*/                   EXIT ;
"""


def test_memory_bound_evidence_runs_memory_tools_only_and_orders_findings():
    ev = evidence({"dram__bytes_read.sum": 1000 * 1e6, "launch__grid_size": 100.0,
                   "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 40e6,  # 2.5x the 16 of 128-bit loads
                   "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": 60.0},  # compute-only tool: not run
                  bound=None)
    fb = run(RefineRequest(evidence=ev))
    assert fb.bound == "memory" and fb.tools_run == [t.NAME for t in select("memory")]
    assert not {"costly_instructions", "fma_low_ilp", "tensor_cores_unused"} & set(fb.tools_run)
    assert [f.tool for f in fb.findings] == ["dram_excess", "uncoalesced_access", "tail_wave"]
    assert [f.severity for f in fb.findings] == sorted((f.severity for f in fb.findings), reverse=True)
    assert fb.text.startswith("Bottleneck class: memory (decided by counters).")
    assert "3.0x" in fb.text and "1. [dram_excess" in fb.text and "3. [tail_wave" in fb.text
    assert run(RefineRequest(evidence=ev, max_findings=1)).findings == fb.findings[:1]


def test_without_counters_the_analytic_class_is_used_and_static_tools_still_fire():
    [(name, stats)] = sass_stats(SNIPPET).items()
    binary = KernelBinary(name=name, registers=40, spill_stores_bytes=4, spill_loads_bytes=4, sass=stats.model_dump())
    ev = evidence(profiled=False, bound=None, binaries=[binary], work=work(), time_us=200.0)
    fb = run(RefineRequest(evidence=ev))
    assert fb.bound == "memory" and "(decided by analytic)" in fb.text
    assert {f.tool for f in fb.findings} == {"spills", "uncoalesced_access"}
    assert all(f.kernel == "_Z9scale_rowPKfPfi" for f in fb.findings) and "32 bits wide" in fb.text


def test_given_class_is_kept_and_healthy_evidence_says_so():
    fb = run(RefineRequest(evidence=evidence(bound="compute", work=work(matmul_share=0.99))))
    assert (fb.bound, fb.findings) == ("compute", []) and "No micro-profiling tool" in fb.text


def test_findings_on_negligible_kernels_are_dropped():
    ev = evidence({"smsp__thread_inst_executed_per_inst_executed.ratio": 8.0}, bound="compute")
    tiny = ev.profile.kernels[0].model_copy(update={"kernel": "fill", "duration_us": 0.01})
    ev.profile.kernels[0] = ev.profile.kernels[0].model_copy(
        update={"metrics": {**ev.profile.kernels[0].metrics, "smsp__thread_inst_executed_per_inst_executed.ratio": 31.0}})
    ev.profile.kernels.append(tiny)
    assert [f.tool for f in TOOLS["warp_divergence"].check(ev)] == ["warp_divergence"]
    assert run(RefineRequest(evidence=ev)).findings == []


def test_findings_in_a_library_kernel_are_context_not_actions():
    """The H200 run of problems/11: spills in cuBLAS's FFMA GEMM fired on a library_epilogue candidate. A kernel
    the candidate did not compile is marked not_own, ranked last and worded as what the candidate cannot edit."""
    spilling = {"l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": 13.6e6, "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum": 7.3e6,
                "dram__bytes_read.sum": 100e6}
    ev = evidence(spilling, bound="compute", library_calls=["aten::mm"])
    gemm = ev.profile.kernels[0].model_copy(update={"kernel": "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_ffma_kernel__5x_cublas"})
    own = ev.profile.kernels[0].model_copy(update={"metrics": {**ev.profile.kernels[0].metrics, **spilling}})
    ev.profile.kernels[:] = [gemm, own]
    fb = run(RefineRequest(evidence=ev))
    spills = [f for f in fb.findings if f.tool == "spills"]
    assert [(f.kernel, f.not_own) for f in spills] == [("void k<4>(float*)", False), (gemm.kernel, True)]
    assert fb.findings[-1].not_own and "a library kernel the candidate calls, not its code" in fb.text
    baseline = run(RefineRequest(evidence=ev.model_copy(update={"contender": "eager", "candidate_id": "eager"})))
    assert not any(f.not_own for f in baseline.findings)  # a baseline compiles nothing: every kernel is its own


def test_a_kernel_the_candidate_defines_but_did_not_compile_is_its_own():
    """The H200 profile of problems/15 on its 28672-wide rows: the compile stage captured the 8192-wide shape, so
    only `_kf_row_resident` was compiled, and the low occupancy of `_kf_row_looped` came back as a library kernel's
    (context, no action). A kernel the candidate's module defines (CompileResult.defined) is its own."""
    low = FIRES["low_occupancy"][0]
    looped = low.profile.kernels[0].model_copy(update={"kernel": "_kf_row_looped"})
    ev = low.model_copy(update={"profile": low.profile.model_copy(update={"kernels": [looped]}),
                                "binaries": [KernelBinary(name="_kf_row_resident", registers=64)]})
    assert [f.not_own for f in run(RefineRequest(evidence=ev)).findings if f.tool == "low_occupancy"] == [True]
    ev = ev.model_copy(update={"defined": ["_kf_row_looped", "_kf_row_resident"]})
    [found] = [f for f in run(RefineRequest(evidence=ev)).findings if f.tool == "low_occupancy"]
    assert (found.kernel, found.not_own, found.action.kind) == ("_kf_row_looped", False, "raise_occupancy")
    assert found.action.params["kernel"] == "_kf_row_looped"  # so the proposer moves that kernel's parameters first


def test_request_round_trips_as_json():
    req = RefineRequest(evidence=evidence(), max_findings=3)
    assert RefineRequest.model_validate_json(req.model_dump_json()) == req


@pytest.mark.parametrize(("dram", "sm", "bound"), [
    (90, 35, "memory"), (20, 85, "compute"), (70, 65, "mixed"), (25, 30, "latency"), (45, 38, "memory")])
def test_counters_decide_the_class(dram, sm, bound):
    ev = evidence({"dram__throughput.avg.pct_of_peak_sustained_elapsed": dram,
                   "sm__throughput.avg.pct_of_peak_sustained_elapsed": sm})
    assert bound_of(ev.profile, ev.work, H200) == (bound, "counters")


def test_short_call_is_latency_bound_and_no_counters_fall_back_to_analytic():
    ev = evidence()
    assert ev.profile is not None and counters_bound(ev.profile, H200) == "memory"
    assert counters_bound(ev.profile.model_copy(update={"time_us": 8.0}), H200) == "latency"
    off = ev.profile.model_copy(update={"counters": "unavailable", "kernels": []})
    assert bound_of(off, work(), H200) == ("memory", "analytic") and bound_of(off, None, None) == (None, None)


def test_evidence_from_stage_results_lets_counters_decide_the_class():
    from kernelflow.stages.contracts import Candidate, KernelProfile, Origin, ProfileResult
    from kernelflow.stages.measure.tools import evidence as gather
    from kernelflow.stages.problems.kernelbench import load_problem

    problem = load_problem(Path(__file__).parents[2] / "problems" / "01_softmax.py")
    cand = Candidate.make(problem.id, "triton", "src", Origin(kind="builtin", proposer="rowwise"))
    measured = {"dram__throughput.avg.pct_of_peak_sustained_elapsed": 88.0,
                "sm__throughput.avg.pct_of_peak_sustained_elapsed": 31.0, "gpu__time_duration.sum": 600_000.0}
    profile = ProfileResult(candidate_id=cand.id, problem_id=problem.id, status="ok", device="cuda", workload="gpu0",
                            counters="ncu", time_us=600.0, sol_floor_us=499.4, bound="compute",
                            bound_source="analytic", kernels=[KernelProfile(kernel="k", invocations=1,
                                                                            duration_us=600.0, metrics=measured)])
    ev = gather(problem, None, profile, "NVIDIA H200")
    assert ev.bound is None and ev.work is not None and ev.launches_per_call == 1
    feedback = run(RefineRequest(evidence=ev))
    assert feedback.bound == "memory" and "counters" in feedback.text
