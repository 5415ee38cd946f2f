"""Micro-profiling tools: for every registered tool, evidence that fires it and healthy evidence that does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages.backends.sass import SassStats
from kernelflow.stages.contracts import KernelBinary, KernelProfile, ProfileResult
from kernelflow.stages.measure.peaks import KNOWN_PEAKS
from kernelflow.stages.measure.roofline import Work
from kernelflow.stages.measure.tools import TOOLS, Evidence, base_name, select

H200 = KNOWN_PEAKS["NVIDIA H200"]
MB = 1e6
HEALTHY = {  # a well-behaved kernel: bandwidth-saturating, coalesced, no spills or conflicts, full warps
    "gpu__time_duration.sum": 100_000.0, "dram__bytes_read.sum": 200 * MB, "dram__bytes_write.sum": 200 * MB,
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": 90.0,
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": 35.0,
    "sm__warps_active.avg.pct_of_peak_sustained_active": 80.0, "sm__maximum_warps_per_active_cycle_pct": 100.0,
    "launch__registers_per_thread": 32.0, "launch__block_size": 256.0, "launch__grid_size": 132 * 64.0,
    "launch__waves_per_multiprocessor": 8.0, "device__attribute_multiprocessor_count": 132.0,
    "launch__occupancy_limit_registers": 8.0, "launch__occupancy_limit_shared_mem": 32.0,
    "launch__occupancy_limit_warps": 8.0, "launch__occupancy_limit_blocks": 32.0,
    "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 16e6, "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum": 1e6,
    "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum": 16e6, "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum": 1e6,
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 100.0,
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 0.0,
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 1e6,
    "l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": 0.0, "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum": 0.0,
    "smsp__thread_inst_executed_per_inst_executed.ratio": 31.5,
    "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 6.0,
    "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio": 0.2,
    "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio": 0.1,
    "smsp__issue_active.avg.pct_of_peak_sustained_active": 70.0,
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 10.0,
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": 2.0,
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 0.0,
    "smsp__inst_executed.sum": 5e7,
}
HEALTHY_SASS = SassStats(instructions_total=60, global_loads_128bit=4, global_loads_total=4,
                         global_load_width_bits_mean=128.0, global_stores_128bit=4, global_stores_total=4,
                         ffma_instructions=8, fp32_arith_instructions=8, mufu_instructions=1,
                         wgmma_instructions=2, tensor_core_instructions=2)  # wgmma: the hmma pipe may read 0


def work(matmul_share: float = 0.0, bytes_min: float = 400 * MB) -> Work:
    flops = 1e9
    return Work(problem_id="p", workload="gpu0", matmul_flops=int(matmul_share * flops), elements_out=10**6,
                pointwise_ops_per_element=(1 - matmul_share) * flops / 1e6, flops=flops, bytes_min=int(bytes_min),
                dtype="bfloat16", tensor_core_eligible=matmul_share > 0)


def evidence(metrics: dict | None = None, sass: SassStats | None = HEALTHY_SASS, profiled: bool = True,
             **fields) -> Evidence:
    """One kernel `k`: healthy counters overridden by `metrics`, healthy SASS; `fields` override Evidence's."""
    kernel = KernelProfile(kernel="void k<4>(float*)", invocations=1, duration_us=100.0,
                           metrics={**HEALTHY, **(metrics or {})})
    profile = ProfileResult(candidate_id="c", problem_id="p", status="ok", device="cuda", workload="gpu0",
                            counters="ncu", kernels=[kernel], time_us=105.0)
    binary = KernelBinary(name="_Z1kILi4EEvPf", registers=32, shared_bytes=0, spill_stores_bytes=0,
                          spill_loads_bytes=0, sass=sass.model_dump() if sass else None)
    base = dict(problem_id="p", candidate_id="c", bound="memory", time_us=105.0, sol_floor_us=93.0, work=work(),
                profile=profile if profiled else None, binaries=[binary], peaks=H200, launches_per_call=1)
    return Evidence(**{**base, **fields})


def narrow(**counts) -> SassStats:
    return HEALTHY_SASS.model_copy(update={"global_loads_128bit": 0, "global_loads_32bit": 4,
                                           "global_load_width_bits_mean": 32.0, **counts})


# tool -> (evidence that fires it, the action kind, a number the diagnosis must quote)
FIRES = {
    "uncoalesced_access": (evidence({"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 32e6}, sass=narrow()),
                           "vectorize_access", "32.0 sectors"),
    "low_occupancy": (evidence({"sm__warps_active.avg.pct_of_peak_sustained_active": 12.5,
                                "sm__maximum_warps_per_active_cycle_pct": 25.0, "launch__registers_per_thread": 255.0,
                                "launch__occupancy_limit_registers": 1.0}), "raise_occupancy", "12.5%"),
    "spills": (evidence({"l1tex__t_bytes_pipe_lsu_mem_local_op_ld.sum": 1 * MB,
                         "l1tex__t_bytes_pipe_lsu_mem_local_op_st.sum": 1 * MB}), "remove_spills", "2.0 MB"),
    "tensor_cores_unused": (evidence(work=work(matmul_share=0.99), bound="compute", sass=HEALTHY_SASS.model_copy(
        update={"wgmma_instructions": 0, "tensor_core_instructions": 0})), "use_tensor_cores", "99%"),
    "bank_conflicts": (evidence({"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 8e5}),
                       "pad_shared_memory", "80%"),
    "warp_divergence": (evidence({"smsp__thread_inst_executed_per_inst_executed.ratio": 14.0}),
                        "reduce_divergence", "14.0 of 32"),
    "long_scoreboard": (evidence({"dram__throughput.avg.pct_of_peak_sustained_elapsed": 20.0,
                                  "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio": 8.0}),
                        "hide_memory_latency", "8.0 warps"),
    "tail_wave": (evidence({"launch__grid_size": 66.0, "launch__waves_per_multiprocessor": 0.5}),
                  "more_parallelism", "66 blocks"),
    "launch_bound": (evidence(profiled=False, launches_per_call=12, time_us=80.0), "fuse_kernels",
                     "12 kernel launches"),
    "dram_excess": (evidence({"dram__bytes_read.sum": 1000 * MB}), "reduce_dram_traffic", "3.0x"),
    "fma_low_ilp": (evidence({"sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": 35.0,
                              "smsp__issue_active.avg.pct_of_peak_sustained_active": 40.0,
                              "dram__throughput.avg.pct_of_peak_sustained_elapsed": 20.0}), "increase_ilp", "35%"),
    "costly_instructions": (evidence({"sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": 60.0}),
                            "cheaper_instructions", "60%"),
    "tensor_pipe_underfed": (evidence({"sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": 70.0},
                                      bound="compute"), "feed_tensor_cores", "70.0%"),
}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_tool_fires_on_its_defect(name):
    ev, kind, number = FIRES[name]  # a KeyError here: a new tool needs a fixture
    [finding] = TOOLS[name].check(ev)
    assert (finding.tool, finding.action.kind) == (name, kind) and number in finding.diagnosis, finding.diagnosis
    assert 0 < finding.severity <= 1 and finding.recommendation and finding.evidence


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_tool_quiet_on_healthy_kernel(name):
    healthy = evidence(work=work(matmul_share=0.99), launches_per_call=1)
    assert TOOLS[name].check(healthy) == [] and TOOLS[name].check(evidence(profiled=False)) == []


def test_tools_without_their_metrics_stay_quiet():
    bare = evidence().model_copy(update={"binaries": []})
    bare.profile.kernels[0].metrics = {}
    assert [f for t in TOOLS.values() for f in t.check(bare)] == []


def test_at_least_twelve_tools_each_in_its_own_file():
    files = {p.stem for p in (Path(__file__).parents[3] / "stages" / "measure" / "tools").glob("*.py")} - {"__init__"}
    assert len(TOOLS) >= 12 and files == set(TOOLS)
    assert all(t.__file__.endswith(f"{n}.py") and t.__doc__ for n, t in TOOLS.items())


def test_select_by_class():
    assert len(select(None)) == len(select("mixed")) == len(TOOLS)
    assert {t.NAME for t in select("compute")} >= {"tensor_cores_unused", "fma_low_ilp", "costly_instructions"}
    assert "dram_excess" not in {t.NAME for t in select("compute")}


def test_kernel_names_match_across_mangled_and_demangled():
    assert base_name("_Z11relu_kernelPKfPfi") == base_name("relu_kernel(const float*, float*, int)") == "relu_kernel"
    assert base_name("_ZN2ns6kernelILi4EEEvPf") == base_name("void ns::kernel<4>(float*)") == "kernel"
    assert base_name("add_kernel") == "add_kernel"


def test_static_fallbacks_fire_without_counters():
    ev = evidence(profiled=False, sass=narrow(local_loads=2, local_stores=2, mufu_instructions=8))
    ev.binaries[0].registers = 168
    fired = {f.tool for t in TOOLS.values() for f in t.check(ev)}
    assert fired == {"uncoalesced_access", "spills", "costly_instructions", "low_occupancy"}


def test_launch_overhead_is_measured_from_kernel_durations_when_profiled():
    ev = evidence(launches_per_call=12, time_us=80.0)
    ev.profile.kernels[0].duration_us, ev.profile.kernels[0].invocations = 2.0, 12
    [f] = TOOLS["launch_bound"].check(ev)
    assert f.evidence["overhead_us"] == 56.0 and "kernels run 24.0 us" in f.diagnosis


def test_no_binary_no_coalescing_verdict():
    """Without SASS the access width is unknown: 16 sectors per request may be 128-bit loads (inductor's)."""
    ev = evidence({"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 16e6}).model_copy(update={"binaries": []})
    assert TOOLS["uncoalesced_access"].check(ev) == []
    assert TOOLS["uncoalesced_access"].check(evidence({"l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum": 16e6},
                                                      sass=narrow()))  # 32-bit loads in SASS: 4x the ideal


def test_a_library_product_is_not_blamed_on_the_candidates_own_sass():
    """library_epilogue: the product runs in cuBLAS, the only SASS held is the epilogue's (no HMMA)."""
    no_mma = HEALTHY_SASS.model_copy(update={"wgmma_instructions": 0, "tensor_core_instructions": 0})
    tool = TOOLS["tensor_cores_unused"]
    for profiled in (True, False):  # with counters (the pipe metric of the library kernel) and without
        ev = evidence(work=work(matmul_share=0.99), bound="compute", sass=no_mma, profiled=profiled)
        assert len(tool.check(ev)) == 1  # its own kernels alone: the product is on CUDA cores
        library = ev.model_copy(update={"library_calls": ["aten.mm"]})
        idle_pipe = tool.check(library)
        assert idle_pipe == [] if not profiled else "tensor pipe" in idle_pipe[0].diagnosis
