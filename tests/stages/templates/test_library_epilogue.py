"""Family `library_epilogue`: the product in cuBLAS/cuDNN through torch, the pointwise rest in one Triton kernel.
Rendered, compiled ahead of time for sm_90a and verified on CPU (Triton's interpreter) by the stages themselves."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages import generate
from kernelflow.stages.contracts import (
    Candidate,
    CompileRequest,
    GenerateRequest,
    Origin,
    Policy,
    Problem,
    VerifyRequest,
)
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[3]
FAMILY = TEMPLATES["library_epilogue"]
# What each problem's candidate calls in the library (the rest is the _kf_epilogue kernel).
LIBRARY_CALLS = {
    "11_linear_bias_gelu": ["torch.addmm(self.linear.bias, x, self.linear.weight.t())"],
    "12_matmul_scale_residual": ["torch.mm(a, b)"],
    "13_conv2d_bias_relu_scale": ["F.conv2d(x, self.conv.weight, self.conv.bias, self.conv.stride, self.conv.padding, "
                                  "self.conv.dilation, self.conv.groups)"],
    "16_swiglu_bf16": ["torch.mm(x, self.w1.weight.t())", "torch.mm(x, self.w3.weight.t())"],
}
NOT_A_PRODUCT = ["01_softmax", "02_log_softmax", "03_layernorm", "04_rmsnorm", "05_gelu_tanh", "06_row_mean",
                 "07_row_max", "09_silu", "14_residual_layernorm", "15_add_rmsnorm", "17_elementwise_chain",
                 "18_scaled_bias_softmax"]
# Paths no benchmark problem takes: a bias computed in forward (added by the epilogue, read per column) and a
# functional convolution with a residual.
SYNTHETIC = {
    "linear_computed_bias": '''
import torch
import torch.nn as nn
import torch.nn.functional as F

rows, cols, out = 64, 32, 48


class Model(nn.Module):
    def __init__(self, cols, out):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out, cols))
        self.bias = nn.Parameter(torch.randn(out))

    def forward(self, x):
        return torch.clamp(F.linear(x, self.weight, self.bias * 2.0), -1.0, 1.0)


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return [cols, out]


WORKLOADS = {"gpu": [dict(rows=4096, cols=1024, out=2048)], "cpu": [dict(rows=9, cols=5, out=37)]}
''',
    "functional_conv_residual": '''
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, channels, size = 2, 4, 8


class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, channels, 3, 3) / 6.0)

    def forward(self, x, residual):
        return torch.sigmoid(F.conv2d(x, self.weight, None, 1, padding=1)) + residual


def get_inputs():
    return [torch.randn(batch, channels, size, size), torch.randn(batch, channels, size, size)]


def get_init_inputs():
    return [channels]


WORKLOADS = {"gpu": [dict(batch=8, channels=64, size=56)], "cpu": [dict(batch=2, channels=3, size=7)]}
''',
}


def problem_at(stem: str) -> Problem:
    return load_problem(ROOT / "problems" / f"{stem}.py")


def candidate(problem: Problem, params: dict | None = None) -> Candidate:
    plan = FAMILY.match(problem, trace(problem, import_problem(problem.path)))
    params = params or FAMILY.variants(plan)[0]
    source = FAMILY.render(plan, params)
    return Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="library_epilogue",
                                                               params=params))


def verified(problem: Problem, cand: Candidate, tmp_path: Path) -> None:
    req = VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem,
                        candidate=cand)
    result = run_stage("verify", req, "inline")
    assert (result.status, result.trials_passed) == ("ok", 5 * len(problem.cpu_workloads)), result.message


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(LIBRARY_CALLS))
def test_candidate_compiles_for_sm90_and_verifies_on_cpu(stem: str, tmp_path: Path) -> None:
    problem = problem_at(stem)
    cand = candidate(problem)
    assert all(f"= {call}" in cand.source for call in LIBRARY_CALLS[stem]) and "cat(" not in cand.source
    compiled = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=cand, problem=problem))
    assert (compiled.status, compiled.mode) == ("ok", "ahead_of_time"), compiled.message
    # the rest in one kernel: the elementwise family's over the products' outputs (or the flat epilogue)
    assert [k.name.split(".")[0] for k in compiled.kernels] in (["_kf_elementwise"], ["_kf_epilogue"])
    assert compiled.kernels[0].registers > 0
    assert compiled.library_calls and set(compiled.library_calls) <= {"aten.mm", "aten.addmm", "aten.convolution"}
    verified(problem, cand, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(LIBRARY_CALLS))
def test_small_blocks_verify(stem: str, tmp_path: Path) -> None:
    """BLOCK 16: several programs and a ragged last one at the CPU sizes."""
    problem = problem_at(stem)
    verified(problem, candidate(problem, {"BLOCK": 16, "num_warps": 4}), tmp_path)


@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_computed_bias_and_functional_conv_verify(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.py"
    path.write_text(SYNTHETIC[name])
    problem = load_problem(path)
    cand = candidate(problem, {"BLOCK": 32, "num_warps": 4})
    assert ("torch.mm(x, self.weight.t())" if "linear" in name else "F.conv2d(x, self.weight, None, 1, padding=1)") \
        in cand.source
    verified(problem, cand, tmp_path)


@pytest.mark.parametrize("stem", NOT_A_PRODUCT)
def test_declines_problems_without_a_product(stem: str) -> None:
    problem = problem_at(stem)
    with pytest.raises(TemplateMismatch, match="no matmul, mm, @, linear or convolution in forward"):
        FAMILY.match(problem, trace(problem, import_problem(problem.path)))


@pytest.mark.parametrize("stem", ["08_matmul_fp32", "10_matmul_bf16"])
def test_declines_a_plain_product(stem: str) -> None:
    problem = problem_at(stem)
    with pytest.raises(TemplateMismatch, match="no epilogue to fuse: the library call alone is the reference"):
        FAMILY.match(problem, trace(problem, import_problem(problem.path)))


def test_declines_when_the_policy_forbids_vendor_libraries() -> None:
    problem = problem_at("11_linear_bias_gelu")
    problem = problem.model_copy(update={"policy": Policy(allow_vendor_libraries=False)})
    with pytest.raises(TemplateMismatch, match="the policy forbids vendor libraries"):
        FAMILY.match(problem, trace(problem, import_problem(problem.path)))
    assert {c.origin.proposer for c in generate.run(GenerateRequest(problem=problem, n=8, families=WRITTEN)).candidates} == {"matmul"}


@pytest.mark.parametrize("stem", ["11_linear_bias_gelu", "12_matmul_scale_residual", "16_swiglu_bf16"])
def test_two_candidates_try_both_families(stem: str) -> None:
    """As the greedy search asks: one at a time, the incumbent as parent, the tried ones excluded."""
    problem = problem_at(stem)
    first = generate.run(GenerateRequest(problem=problem, n=1, families=WRITTEN)).candidates[0]
    second = generate.run(GenerateRequest(problem=problem, n=1, parent=first, exclude_ids=[first.id], families=WRITTEN,
                                          seed=1)).candidates[0]
    unverified = generate.run(GenerateRequest(problem=problem, n=1, exclude_ids=[first.id], seed=1,
                                               families=WRITTEN)).candidates[0]
    assert {first.origin.proposer, second.origin.proposer} == {"library_epilogue", "matmul"}
    assert unverified.origin.proposer == second.origin.proposer
    assert {c.origin.proposer for c in generate.run(GenerateRequest(problem=problem, n=2, families=WRITTEN)).candidates} == \
        {"library_epilogue", "matmul"}
