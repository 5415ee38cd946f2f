"""Family `pooling`: max, average and adaptive pooling over 1-3 spatial dims, with the pointwise ops around them, in
one kernel. Every variant matches the reference at the CPU workloads (Triton's interpreter): padding, dilation,
ceil_mode, count_include_pad, divisor_override, a per-channel operand after the pool; two compile ahead of time for
sm_90a and verify; the declines say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages import generate
from kernelflow.stages.contracts import Candidate, CompileRequest, GenerateRequest, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch
from tests.families import WRITTEN
from tests.stages.proposers.test_proposer_builtin import assert_matches
from tests.stages.templates.test_decomposed import PROBLEM

FAMILY = TEMPLATES["pooling"]
X2, X1, X3 = "torch.randn(n, c, h, w)", "torch.randn(n, c, w)", "torch.randn(n, c, 4, h, w)"
CASES = {  # name: (forward, __init__ line, input)
    "max2d_fused": ("torch.tanh(F.max_pool2d(torch.relu(x) * 1.5, 3, 2, 1) + self.b)",
                    "self.b = nn.Parameter(torch.randn(c, 1, 1))", X2),
    "max2d_module": ("self.pool(x) * 2.0", "self.pool = nn.MaxPool2d(2)", X2),
    "max2d_dilated_ceil": ("F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True)", "pass", X2),
    "avg2d": ("F.avg_pool2d(x, 2)", "pass", X2),
    "avg2d_exclude_pad_ceil": ("F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False)", "pass", X2),
    "avg2d_include_pad_ceil": ("F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)", "pass", X2),
    "avg2d_divisor": ("F.avg_pool2d(x - 1.0, 2, divisor_override=3)", "pass", X2),
    "max1d": ("F.max_pool1d(x, 3, 2)", "pass", X1),
    "avg1d": ("F.avg_pool1d(torch.sigmoid(x), 4, 3, 2)", "pass", X1),
    "avg3d": ("F.avg_pool3d(x, 2)", "pass", X3),
    "max3d": ("F.max_pool3d(x, (2, 3, 2), stride=(1, 2, 2), padding=(0, 1, 1))", "pass", X3),
    "adaptive_avg": ("F.adaptive_avg_pool2d(x, (3, 2))", "pass", X2),
    "adaptive_max": ("F.adaptive_max_pool2d(x, (2, 4)) + 1.0", "pass", X2),
}
DECLINED = {
    "F.max_pool2d(x, 2, return_indices=True)[1].float()": "indices are used",
    "F.max_pool2d(F.max_pool2d(x, 2), 2)": "2 pooling ops",
    "F.max_pool2d(x, 2).sum(dim=1)": "a reduction after the pooling",
    "F.adaptive_avg_pool2d(x, 1)": "no max, average or adaptive pooling",  # a mean: the rowwise family's
    "torch.relu(x)": "no max, average or adaptive pooling",
}


def synthetic(tmp_path: Path, forward: str, init: str = "pass", inputs: str = X2, name: str = "pool") -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(PROBLEM.format(forward=forward, init=init, args="x", inputs=inputs))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_variant_matches_the_reference(name: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, *CASES[name], name=name)
    problem = load_problem(path)
    plan = FAMILY.match(problem, trace(problem, import_problem(path)))
    for params in FAMILY.variants(plan)[:2] + [{"BLOCK": 32, "num_warps": 1}]:  # several blocks a program grid
        candidate = Candidate.make(problem.id, "triton", FAMILY.render(plan, params),
                                   Origin(kind="builtin", proposer="pooling", params=params))
        assert_matches(candidate, path, tmp_path)


def test_the_proposer_offers_pooling_for_a_pool(tmp_path: Path) -> None:
    path = synthetic(tmp_path, *CASES["max2d_fused"])
    result = generate.run(GenerateRequest(problem=load_problem(path), n=4, families=WRITTEN))
    assert "pooling" in {c.origin.proposer for c in result.candidates}, result.message


@pytest.mark.parametrize(("forward", "reason"), sorted(DECLINED.items()))
def test_declines_with_the_reason(forward: str, reason: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, forward)
    problem = load_problem(path)
    with pytest.raises(TemplateMismatch, match=reason):
        FAMILY.match(problem, trace(problem, import_problem(path)))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["max2d_fused", "avg2d_exclude_pad_ceil"])
def test_compiles_for_sm90_and_verifies(name: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, *CASES[name], name=name)
    problem = load_problem(path)
    candidate = next(c for c in generate.run(GenerateRequest(problem=problem, n=4)).candidates
                     if c.origin.proposer == "pooling")
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=candidate, problem=problem))
    assert (res.status, res.mode) == ("ok", "ahead_of_time") and [k.name.split(".")[0] for k in res.kernels] == [
        "_kf_pool"], res.message
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem, candidate=candidate),
                       "inline")
    assert result.status == "ok", result.message
