"""Family `loss`: whole-tensor sums/means, pointwise losses and cross-entropy to a 0-dim output in two stages (an
elementwise output that reads the sums in a third).
Every variant matches the reference on CPU (Triton's interpreter), compiles ahead of time for sm_90a, verifies
inline (a second call agrees), and the family declines what it does not compute, saying why."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, CompileRequest, Origin, Problem, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.measure.roofline import count_work
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import Plan, TemplateMismatch
from tests.stages.proposers.test_proposer_builtin import assert_matches

ROOT = Path(__file__).resolve().parents[3]
FAMILY = TEMPLATES["loss"]
KERNELS = {"20_mse_loss": ["_kf_loss_partial", "_kf_loss_combine"],
           "21_cross_entropy": ["_kf_ce_partial", "_kf_ce_combine"]}
# Small tiles: several programs striding over the tensor (whole) or rows, classes in several chunks with a ragged
# last one, several rows per tile with masked rows past N (max_block_c 256 at C = 96 or 101: 2 rows per tile).
SMALL = {"20_mse_loss": [{"BLOCK": 16, "num_warps": 4, "programs": 3}, {"BLOCK": 64, "num_warps": 4, "programs": 100}],
         "21_cross_entropy": [{"max_block_c": 32, "num_warps": 4, "programs": 2},
                              {"max_block_c": 256, "num_warps": 4, "programs": 3}]}

SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

rows, cols = 64, 32


class Model(nn.Module):
    def __init__(self, cols):
        super().__init__()
        {init}

    def forward(self, x, y):
        return {expr}


def get_inputs():
    return [torch.randn(rows, cols), {second}]


def get_init_inputs():
    return [cols]


WORKLOADS = {{"gpu": [dict(rows=4096, cols=1024)], "cpu": [dict(rows=9, cols=37), dict(rows=5, cols=4)]}}
'''
FLOAT, TARGETS = "torch.randn(rows, cols)", "torch.randint(0, cols, (rows,))"
IGNORED = "torch.randint(0, cols, (rows,)).index_fill(0, torch.arange(0, rows, 3), -100)"  # every third row ignored
SUPPORTED = {  # name: (forward expression, __init__ line, second input)
    "mean_of_squares": ("torch.mean((x - y) ** 2)", "pass", FLOAT),
    "mse_sum_module": ("self.loss(x, y)", "self.loss = nn.MSELoss(reduction='sum')", FLOAT),
    "l1": ("F.l1_loss(x, y)", "pass", FLOAT),
    "smooth_l1_module": ("self.loss(x, y)", "self.loss = nn.SmoothL1Loss(beta=0.5)", FLOAT),
    "huber_sum": ("F.huber_loss(x, y, reduction='sum', delta=2.0)", "pass", FLOAT),
    "two_sums_scaled": ("(x * self.w).sum() * self.scale + torch.mean(torch.abs(y))",
                        "self.w, self.scale = nn.Parameter(torch.randn(cols)), 0.25", FLOAT),
    "broadcast_target": ("F.mse_loss(x, self.w)", "self.w = nn.Parameter(torch.randn(cols))", FLOAT),
    "frobenius_normalized": ("x / torch.norm(x, p='fro')", "pass", FLOAT),  # elementwise output: a third stage
    "centered": ("x * self.w - x.mean()", "self.w = nn.Parameter(torch.randn(cols))", FLOAT),
    "ce_ignored_rows": ("F.cross_entropy(x, y)", "pass", IGNORED),
    "ce_module_sum_ignore_1": ("self.loss(x, y)", "self.loss = nn.CrossEntropyLoss(ignore_index=1, reduction='sum')",
                               TARGETS),
}
DECLINED = {  # name: (forward expression, __init__ line, second input, reason)
    "unreduced": ("F.mse_loss(x, y, reduction='none')", "pass", FLOAT, "not a whole-tensor reduction"),
    "amax": ("torch.amax(x - y)", "pass", FLOAT, "maximum or minimum of a whole tensor"),
    "dim_mean": ("torch.mean(x - y, dim=0)", "pass", FLOAT, "not the whole tensor"),
    "two_passes": ("torch.mean((x - x.mean()) ** 2)", "pass", FLOAT, "two passes"),
    "kept_dims": ("torch.sum(x - y, dim=(0, 1), keepdim=True)", "pass", FLOAT, "with its dims kept"),
    "softmax_sum": ("torch.softmax(x, -1).sum()", "pass", FLOAT, "one set of dims"),
    "label_smoothing": ("F.cross_entropy(x, y, label_smoothing=0.1)", "pass", TARGETS, "label_smoothing=0.1"),
    "class_weights": ("self.loss(x, y)", "self.loss = nn.CrossEntropyLoss(weight=torch.ones(cols))", TARGETS,
                      "with a weight"),
    "ce_unreduced": ("F.cross_entropy(x, y, reduction='none')", "pass", TARGETS, "not a scalar"),
    "ce_computed_logits": ("F.cross_entropy(x * 2.0, y)", "pass", TARGETS, "only of forward's own inputs"),
    "ce_probabilities": ("F.cross_entropy(x, y)", "pass", "torch.softmax(torch.randn(rows, cols), -1)",
                         "only int64 class indices"),
    "ce_plus_more": ("F.cross_entropy(x, y) * 2.0", "pass", TARGETS, "other ops around it"),
}
OTHERS = {"01_softmax": "not the whole tensor", "05_gelu_tanh": "not a whole-tensor reduction",
          "06_row_mean": "not the whole tensor", "08_matmul_fp32": "aten.mm: a matrix product",
          "11_linear_bias_gelu": "aten.addmm: a matrix product", "14_residual_layernorm": "not the whole tensor"}


def problem_at(stem: str) -> Problem:
    return load_problem(ROOT / "problems" / f"{stem}.py")


def synthetic(tmp_path: Path, name: str, expr: str, init: str, second: str) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.format(expr=expr, init=init, second=second))
    return load_problem(path)


def plan_of(problem: Problem) -> Plan:
    return FAMILY.match(problem, trace(problem, import_problem(problem.path)))


def candidate(problem: Problem, params: dict) -> Candidate:
    return Candidate.make(problem.id, "triton", FAMILY.render(plan_of(problem), params),
                          Origin(kind="builtin", proposer="loss", params=params))


def verified(problem: Problem, cand: Candidate, tmp_path: Path) -> None:
    req = VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem,
                        candidate=cand)
    result = run_stage("verify", req, "inline")
    assert (result.status, result.trials_passed) == ("ok", 5 * len(problem.cpu_workloads)), result.message
    log = (tmp_path / "verify" / result.files["verify_log"]).read_text()
    assert "differs bitwise" not in log and "ok, error ratio" in log  # the second call gave the same bits


@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_every_variant_and_small_tiles_match_the_reference(stem: str, tmp_path: Path) -> None:
    problem = problem_at(stem)
    for params in FAMILY.variants(plan_of(problem)) + SMALL[stem]:
        assert_matches(candidate(problem, params), Path(problem.path), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_compiles_for_sm90_ahead_of_time_and_verifies(stem: str, tmp_path: Path) -> None:
    problem = problem_at(stem)
    cand = candidate(problem, FAMILY.variants(plan_of(problem))[0])
    compiled = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=cand, problem=problem))
    assert (compiled.status, compiled.mode) == ("ok", "ahead_of_time"), compiled.message
    assert sorted(k.name.split(".")[0] for k in compiled.kernels) == sorted(KERNELS[stem])
    assert all(k.registers > 0 for k in compiled.kernels) and not compiled.library_calls
    assert "atomic" not in cand.source  # partials combined in a fixed order: a second call gives the same bits
    verified(problem, cand, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("stem", sorted(KERNELS))
def test_small_tiles_verify(stem: str, tmp_path: Path) -> None:
    problem = problem_at(stem)
    verified(problem, candidate(problem, SMALL[stem][0]), tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SUPPORTED))
def test_other_losses_and_sums_verify(name: str, tmp_path: Path) -> None:
    problem = synthetic(tmp_path, name, *SUPPORTED[name])
    verified(problem, candidate(problem, {"BLOCK": 16, "num_warps": 4, "programs": 5} if "ce_" not in name
                                else {"max_block_c": 16, "num_warps": 4, "programs": 3}), tmp_path)


def test_a_whole_tensor_norm_feeding_an_elementwise_output_is_three_stages(tmp_path: Path) -> None:
    """x / ||x||_F: partial sums, their combination (the sum's square root, kept in float32), then the elementwise
    output over the flattened tensor, reading it; every variant and small tiles (several programs, a ragged last
    block) match the reference."""
    problem = synthetic(tmp_path, "frobenius_normalized", *SUPPORTED["frobenius_normalized"])
    plan = plan_of(problem)
    source = FAMILY.render(plan, FAMILY.variants(plan)[0])
    assert all(f"def {k}(" in source for k in ("_kf_loss_partial", "_kf_loss_combine", "_kf_loss_apply"))
    for params in FAMILY.variants(plan) + [{"BLOCK": 16, "num_warps": 4, "programs": 5}]:
        assert_matches(candidate(problem, params), Path(problem.path), tmp_path)


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declines_what_it_does_not_compute(name: str, tmp_path: Path) -> None:
    expr, init, second, reason = DECLINED[name]
    with pytest.raises(TemplateMismatch, match=reason.replace("(", r"\(").replace(")", r"\)")):
        plan_of(synthetic(tmp_path, name, expr, init, second))


@pytest.mark.parametrize("stem", sorted(OTHERS))
def test_declines_the_other_problems(stem: str) -> None:
    with pytest.raises(TemplateMismatch, match=OTHERS[stem]):
        plan_of(problem_at(stem))


def test_roofline_counts_a_scalar_output() -> None:
    """A 0-dim output: one element written; the inputs (int64 targets included) read once."""
    for stem, inputs_bytes in (("20_mse_loss", 2 * 4 * 32768 * 8192), ("21_cross_entropy", 4 * 32768 * 32000 + 8 * 32768)):
        problem = problem_at(stem)
        work = count_work(problem, problem.gpu_workloads[0])
        assert (work.elements_out, work.bytes_min, work.matmul_flops) == (1, inputs_bytes + 4, 0)
        assert work.flops >= 2 * inputs_bytes / 8, work  # at least a subtraction and a sum per element
