"""The micro-profiling tools on metrics captured from real Nsight Compute runs on the H200.

tests/fixtures/ncu/h200/<entry>.json is written by scripts/capture_ncu_fixtures.py on the GPU machine
(stages/measure/captured.py: the problem, the candidate, its ptxas/SASS statistics and its profile: time, energy, ncu
counters per kernel). Here refine runs
on them exactly as the flow does (class from the counters, the tools that class selects, causes first).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelflow.stages import refine
from kernelflow.stages.contracts import Feedback
from kernelflow.stages.measure import captured
from kernelflow.stages.measure.tools import TOOLS, Evidence

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = sorted((ROOT / "tests" / "fixtures" / "ncu" / "h200").glob("*.json"))


def load(path: Path) -> tuple[dict, Evidence]:
    record, ev = captured.load_capture(path)
    assert ev.profile is not None and ev.profile.counters == "ncu" and ev.profile.kernels, path.name
    assert record["gpu"] == "NVIDIA H200" and record["candidate"] is not None
    return record, ev


def feedback(path: Path) -> Feedback:
    return refine.run(refine.RefineRequest(evidence=load(path)[1]))


DEFECTS = [p for p in FIXTURES if json.loads(p.read_text())["expected_tool"]]


def test_every_tool_has_a_captured_defect():
    assert {json.loads(p.read_text())["expected_tool"] for p in DEFECTS} == set(TOOLS)


@pytest.mark.parametrize("path", DEFECTS, ids=lambda p: p.stem)
def test_defect_fires_its_tool_as_a_cause(path: Path):
    expected = json.loads(path.read_text())["expected_tool"]
    fb = feedback(path)
    causes = [f.tool for f in fb.findings if f.explained_by is None]
    assert expected in causes, (fb.bound, [(f.tool, f.severity, f.explained_by) for f in fb.findings])
    assert expected in fb.text


@pytest.mark.parametrize("path", [p for p in FIXTURES if p.stem.startswith("builtin_")], ids=lambda p: p.stem)
def test_builtin_memory_bound_kernels_get_no_advice(path: Path):
    """The builtin proposer's row and elementwise kernels stream at 85-90% of DRAM bandwidth: memory-bound by the
    counters, and no tool has a complaint."""
    fb = feedback(path)
    assert fb.bound == "memory" and fb.findings == [], fb.text


def test_triton_rewrites_a_sum_of_products_into_mma():
    """tl.sum(a[:, :, None] * b[None, :, :], 1) compiles to HMMA in Triton 3.6: tensor cores in use, no finding."""
    d, ev = load(ROOT / "tests" / "fixtures" / "ncu" / "h200" / "triton_sum_matmul.json")
    assert sum(b.sass["tensor_core_instructions"] for b in ev.binaries if b.sass) > 0
    assert TOOLS["tensor_cores_unused"].check(ev.model_copy(update={"bound": "compute"})) == []


def test_symptoms_follow_their_causes():
    """Under low occupancy the long-scoreboard stalls are a consequence: listed after it, marked as such."""
    fb = feedback(ROOT / "tests" / "fixtures" / "ncu" / "h200" / "low_occupancy.json")
    tools = [f.tool for f in fb.findings]
    assert tools.index("low_occupancy") < tools.index("long_scoreboard")
    assert next(f for f in fb.findings if f.tool == "long_scoreboard").explained_by == "low_occupancy"
    assert "likely a consequence of low_occupancy" in fb.text


def test_launch_bound_call_ranks_launches_first():
    """100 launches of a tiny kernel: kernel-level findings are scaled by the kernels' share of the call's time."""
    fb = feedback(ROOT / "tests" / "fixtures" / "ncu" / "h200" / "launch_bound.json")
    assert fb.findings[0].tool == "launch_bound" and all(f.severity < 0.2 for f in fb.findings[1:])


def test_cublas_keeps_its_tensor_pipe_fed_and_gets_no_advice():
    """The same 8192^3 bf16 product under eager PyTorch (cuBLAS, tensor pipe 96.9% busy): compute-bound, no finding,
    where the Triton GEMM of the tensor_pipe_underfed fixture (84.9%) is told to feed its tensor cores."""
    _, ev = captured.load_capture(ROOT / "tests" / "fixtures" / "ncu" / "h200" / "baselines" / "10_matmul_bf16.eager.json")
    fb = refine.run(refine.RefineRequest(evidence=ev))
    assert ev.contender == "eager" and fb.bound == "compute" and fb.findings == [], fb.text
    underfed = feedback(ROOT / "tests" / "fixtures" / "ncu" / "h200" / "tensor_pipe_underfed.json")
    assert [f.tool for f in underfed.findings] == ["tensor_pipe_underfed"] and "84.9%" in underfed.text
