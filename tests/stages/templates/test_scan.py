"""Family `scan`: inclusive scans along the last dim with pointwise ops around them. Every variant matches the reference
on CPU (Triton's interpreter), the looped kernel carries the running total across chunks, the kernels compile ahead
of time for sm_90a, verify passes, and what the family cannot render is declined with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages import generate
from kernelflow.stages.contracts import (
    Candidate,
    CompileRequest,
    GenerateRequest,
    Origin,
    Problem,
    VerifyRequest,
)
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem, workload_call
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch
from tests.families import WRITTEN
from tests.stages.proposers.test_proposer_builtin import assert_matches

ROOT = Path(__file__).resolve().parents[3]
FAMILY = TEMPLATES["scan"]
CUMSUM = ROOT / "problems" / "19_cumsum.py"

PROBLEM = '''
import torch
import torch.nn as nn

rows, cols = 64, 4096


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.w = nn.Parameter(0.1 * torch.randn(cols))

    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols]


WORKLOADS = {{"gpu": [dict(rows=64, cols={gpu_cols})], "cpu": [dict(rows=5, cols=37), dict(rows=3, cols=130)]}}
'''
# Scans the benchmark suite does not take: a product (of values near 1), a running max and min (values of the
# (values, indices) pair), a per-column operand, a method call with dim=ndim-1, a scan of a scan and ops after it.
SYNTHETIC = {
    "cumprod": "torch.cumprod(1.0 + 0.05 * torch.tanh(x), dim=-1)",
    "cummax_values": "torch.cummax(x * self.w, dim=-1).values - x",
    "cummin_getitem": "torch.cummin(x, 1)[0] * 2.0",
    "method_chain": "torch.exp(torch.tanh((x + self.w).cumsum(1)))",
    "scan_of_scan": "torch.cumsum(torch.cumsum(x, dim=-1) * 0.01, dim=-1) - x",
    "first_dim": "torch.cumsum(x * self.w, dim=0)",
}
DECLINED = {
    "torch.cumsum(x.sum(-1, keepdim=True), dim=-1)": "cumsum of a reduced value",
    "torch.cumsum(x - x.mean(-1, keepdim=True), dim=-1)": "the row is also reduced",
    "torch.cumsum(x, dim=-1).sum(-1)": "the row is also reduced",
    "torch.flip(torch.cumsum(torch.flip(x, [-1]), dim=-1), [-1])": "aten.rev: a flip",
    "torch.cummax(x, dim=-1).indices.float()": "is not lowered (only the values)",
    "torch.cumsum(x, dim=-1, dtype=torch.float64)": "float64",
    "torch.logcumsumexp(x, dim=-1)": "aten.logcumsumexp: no family lowers it",
    "torch.softmax(x, dim=-1)": "no scan (cumsum, cumprod, cummax, cummin) along a dim",
}


def synthetic(tmp_path: Path, forward: str, gpu_cols: int = 4096) -> Path:
    path = tmp_path / "scan_problem.py"
    path.write_text(PROBLEM.format(forward=forward, gpu_cols=gpu_cols))
    return path


def candidate(path: Path, params: dict) -> Candidate:
    problem = load_problem(path)
    source = FAMILY.render(FAMILY.match(problem, trace(problem, import_problem(path))), params)
    return Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="scan", params=params))


@pytest.mark.slow
def test_19_gets_scan_candidates_only_and_every_variant_matches(tmp_path: Path) -> None:
    result = generate.run(GenerateRequest(problem=load_problem(CUMSUM), n=100, families=WRITTEN))
    assert result.candidates and {c.origin.proposer for c in result.candidates} == {"scan"}
    problem = load_problem(CUMSUM)
    assert len(result.candidates) == len(FAMILY.variants(FAMILY.match(problem, trace(problem, import_problem(CUMSUM)))))
    for cand in result.candidates:
        assert_matches(cand, CUMSUM, tmp_path)


@pytest.mark.parametrize("name", ["19_cumsum", *sorted(SYNTHETIC)])
@pytest.mark.parametrize("params", [{"num_warps": 4, "max_block_d": 16},  # every CPU row loops over chunks
                                    {"num_warps": 4, "max_block_d": 8192, "min_tile": 512}],  # rows per program
                         ids=["looped", "rows"])
def test_looped_and_multi_row_kernels_match(name: str, params: dict, tmp_path: Path) -> None:
    path = CUMSUM if name == "19_cumsum" else synthetic(tmp_path, SYNTHETIC[name])
    problem, module = load_problem(path), import_problem(path)
    widths = [workload_call(module, w, "get_inputs", path, meta=True)[0].shape[-1] for w in problem.cpu_workloads]
    assert min(widths) > 2 * 16 and any(d % 16 for d in widths), widths  # looped: 3+ chunks, a ragged last one
    cand = candidate(path, params)
    assert ("_kf_launch(_kf_scan_looped, " if "min_tile" not in params else "_kf_launch(_kf_scan_rows, ") in cand.source
    assert_matches(cand, path, tmp_path)


def compiled(problem: Problem, cand: Candidate, tmp_path: Path) -> list[str]:
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=cand, problem=problem))
    assert (res.status, res.mode) == ("ok", "ahead_of_time"), res.message
    assert all(k.registers > 0 for k in res.kernels) and not res.library_calls
    return [k.name.split(".")[0] for k in res.kernels]


@pytest.mark.slow
@pytest.mark.parametrize(("params", "kernel"), [({"num_warps": 8, "max_block_d": 8192}, "_kf_scan_resident"),
                                                ({"num_warps": 8, "max_block_d": 2048}, "_kf_scan_looped")])
def test_19_compiles_for_sm90_ahead_of_time_and_verifies(params: dict, kernel: str, tmp_path: Path) -> None:
    """At the first GPU shape (D = 8192): the resident kernel, or the looped one when max_block_d is below D."""
    problem = load_problem(CUMSUM)
    cand = candidate(CUMSUM, params)
    assert compiled(problem, cand, tmp_path) == [kernel]
    req = VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem,
                        candidate=cand)
    result = run_stage("verify", req, "inline")
    assert (result.status, result.trials_passed) == ("ok", 5 * len(problem.cpu_workloads)), result.message


@pytest.mark.slow
def test_cumprod_and_cummax_rows_kernels_compile_for_sm90(tmp_path: Path) -> None:
    """A narrow first GPU shape: several rows per program, the product and maximum combine functions compiled."""
    for forward in (SYNTHETIC["cumprod"], SYNTHETIC["cummax_values"]):
        path = synthetic(tmp_path, forward, gpu_cols=1000)
        cand = candidate(path, {"num_warps": 4, "max_block_d": 8192, "min_tile": 4096})
        assert compiled(load_problem(path), cand, tmp_path) == ["_kf_scan_rows"]


@pytest.mark.parametrize("forward", sorted(DECLINED))
def test_declines_with_the_reason(forward: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, forward)
    problem = load_problem(path)
    with pytest.raises(TemplateMismatch, match=DECLINED[forward].replace("(", r"\(").replace(")", r"\)")):
        FAMILY.match(problem, trace(problem, import_problem(path)))


@pytest.mark.parametrize("forward", ["torch.cumsum(x, dim=-1)", "torch.exp(x.cumsum(-1)) * self.w"])
def test_other_families_decline_a_scan(forward: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, forward)
    result = generate.run(GenerateRequest(problem=load_problem(path), n=100, families=WRITTEN))
    assert {c.origin.proposer for c in result.candidates} == {"scan"}
    for family in ("elementwise", "rowwise"):
        problem = load_problem(path)
        with pytest.raises(TemplateMismatch, match="aten.cumsum: a scan along a dim"):
            TEMPLATES[family].match(problem, trace(problem, import_problem(path)))
