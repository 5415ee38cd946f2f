"""The ATen lowering (torch's decompositions, stages/templates/decomposed.py) reaches the families: pointwise ops that
no table names (softplus, SELU, ELU, Mish), logsumexp, a masked softmax, reductions over a middle dim and over several
dims, batch norm in its inference form (nn.BatchNorm as the harness runs it: eval mode) and its training form
(batch statistics: track_running_stats=False, F.batch_norm(training=True)), group norm, instance norm, global pooling. Every candidate the
builtin proposer makes matches the reference at the CPU workloads (Triton's interpreter, both shapes of each); a few
compile ahead of time for sm_90a and pass verify; what cannot be lowered is named by its ATen op."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kernelflow.stages import generate
from kernelflow.stages.contracts import Candidate, CompileRequest, GenerateRequest, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES, rowwise
from kernelflow.stages.templates.lowering import lower, trace
from kernelflow.stages.templates.program import TemplateMismatch
from tests.families import WRITTEN
from tests.stages.proposers.test_proposer_builtin import PROBLEMS, assert_matches

PROBLEM = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

n, c, h, w = 16, 64, 32, 32


class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        {init}

    def forward(self, {args}):
        return {forward}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [c]


WORKLOADS = {{"gpu": [dict(n=16, c=64, h=32, w=32)], "cpu": [dict(n=2, c=4, h=7, w=9), dict(n=3, c=8, h=5, w=6)]}}
'''
X = "torch.randn(n, c, h, w)"
RUNNING = ("self.bn = nn.BatchNorm2d(c).eval(); self.bn.running_mean.uniform_(-1.0, 1.0); "
           "self.bn.running_var.uniform_(0.5, 2.0); self.bn.weight.data.uniform_(0.5, 1.5)")
# name: (forward, __init__ line, forward's args, inputs, the family that takes it)
CASES = {
    "softplus": ("F.softplus(x * 3.0)", "pass", "x", X, "elementwise"),
    "selu": ("F.selu(x)", "pass", "x", X, "elementwise"),
    "elu": ("F.elu(x, alpha=0.7)", "pass", "x", X, "elementwise"),
    "mish": ("F.mish(x)", "pass", "x", X, "elementwise"),
    "hardswish_clamp": ("torch.clamp(F.hardswish(x), -0.2, 2.0) + F.hardtanh(x, -0.5, 0.5)", "pass", "x", X,
                        "elementwise"),
    "logsumexp": ("torch.logsumexp(x, dim=-1)", "pass", "x", X, "rowwise"),
    "masked_softmax": ("torch.softmax(x.masked_fill(m, float('-inf')) / 0.7, dim=-1)", "pass", "x, m",
                       f"{X}, torch.rand(n, c, h, w) > 0.75", "rowwise"),
    "middle_dim_mean": ("x.mean(dim=1) * 2.0", "pass", "x", X, "rowwise"),
    "channel_softmax": ("torch.softmax(x * 2.0, dim=1)", "pass", "x", X, "rowwise"),
    "channel_argmax": ("torch.argmax(x, dim=1)", "pass", "x", X, "rowwise"),
    "two_dims_max": ("torch.amax(x, dim=(0, 2)) - 1.0", "pass", "x", X, "rowwise"),
    "batchnorm_eval": ("torch.relu(self.bn(x))", RUNNING, "x", X, "elementwise"),
    "batchnorm_train": ("torch.relu(self.bn(x))", "self.bn = nn.BatchNorm2d(c, track_running_stats=False)", "x", X,
                        "rowwise"),
    "batchnorm_functional_train": ("F.batch_norm(x, self.m, self.v, self.w, None, training=True) * 2.0",
                                   "self.register_buffer('m', torch.zeros(c)); self.register_buffer('v', torch.ones(c)); "
                                   "self.w = nn.Parameter(torch.rand(c))",
                                   "x", X, "rowwise"),
    "groupnorm": ("F.silu(self.gn(x))",
                  "self.gn = nn.GroupNorm(2, c); self.gn.weight.data.uniform_(0.5, 1.5); self.gn.bias.data.normal_()",
                  "x", X, "rowwise"),
    "instancenorm": ("self.inorm(x) * 0.5", "self.inorm = nn.InstanceNorm2d(c, affine=True)", "x", X, "rowwise"),
    "global_avg_pool": ("torch.tanh(F.adaptive_avg_pool2d(x, 1) + self.b)", "self.b = nn.Parameter(torch.randn(c, 1, 1))",
                        "x", X, "rowwise"),
}
DECLINED = {  # forward: the reason every family but the named ones gives
    "torch.flip(x, [1])": "aten.rev: a flip",
    "x[:, 1:] * 2.0": "aten.slice: a slice",
    "x.sum(dim=1, keepdim=True) + x.sum(dim=3, keepdim=True)": "one set of dims",
}


def synthetic(tmp_path: Path, name: str) -> Path:
    forward, init, args, inputs, _ = CASES[name]
    path = tmp_path / f"{name}.py"
    path.write_text(PROBLEM.format(forward=forward, init=init, args=args, inputs=inputs))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_familys_variants_match_the_reference(name: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, name)
    problem, family = load_problem(path), CASES[name][4]
    plan = TEMPLATES[family].match(problem, trace(problem, import_problem(path)))
    for params in TEMPLATES[family].variants(plan)[:2]:
        source = TEMPLATES[family].render(plan, params)
        assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer=family,
                                                                           params=params)), path, tmp_path)


@pytest.mark.parametrize("name", ["softplus", "batchnorm_train"])
def test_the_proposer_offers_the_family(name: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, name)
    result = generate.run(GenerateRequest(problem=load_problem(path), n=4, families=WRITTEN))
    ours = [c for c in result.candidates if c.origin.proposer == CASES[name][4]]
    assert ours, result.message
    assert_matches(ours[0], path, tmp_path)


@pytest.mark.parametrize("name", ["middle_dim_mean", "batchnorm_train", "groupnorm"])
def test_looped_rows_match_the_reference(name: str, tmp_path: Path) -> None:
    """Rows longer than the chunk (max_block_d 8): the looped kernel walks strided columns, Welford included."""
    path = synthetic(tmp_path, name)
    problem = load_problem(path)
    family = TEMPLATES["rowwise"]
    plan = family.match(problem, trace(problem, import_problem(path)))
    for params in ({"num_warps": 4, "max_block_d": 8}, {"num_warps": 4, "max_block_d": 64, "min_tile": 256}):
        source = family.render(plan, params)
        assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="rowwise",
                                                                           params=params)), path, tmp_path)


@pytest.mark.parametrize("name", ["middle_dim_mean", "channel_softmax", "channel_argmax", "two_dims_max"])
def test_wide_strided_rows_take_a_multi_row_tile(name: str, tmp_path: Path) -> None:
    """Reductions over a middle dim (the innermost kept: rows adjacent in memory): rows too wide for 16 of them in a
    min_tile (here every row) go to the multi-row looped kernel, strided_rows a program in 2-column chunks (online softmax, argmax and sums carried per
    lane, the last program's extra rows masked), where the innermost kept axis runs 16 or more at run time
    (middle_dim_mean and the channel ops keep h x w = 63 and 30); two_dims_max keeps w = 9 or 6: one row a program."""
    path = synthetic(tmp_path, name)
    problem = load_problem(path)
    family = TEMPLATES["rowwise"]
    plan = family.match(problem, trace(problem, import_problem(path)))
    assert rowwise.strided(plan.program) and family.variants(plan)[0]["strided_rows"] == rowwise.STRIDED_ROWS
    params = {"num_warps": 4, "max_block_d": 8, "min_tile": 4, "strided_rows": 2}
    source = family.render(plan, params)
    assert "_kf_launch(_kf_rows_looped, (_kf_cdiv(rows, 2),), " in source and "BLOCK_D=2, " in source
    assert f"wide = z{rowwise._innermost(plan.program)} >= 16 and block_d * 16 > 4" in source
    assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="rowwise",
                                                                       params=params)), path, tmp_path)


def test_few_wide_strided_rows_split_their_columns(tmp_path: Path) -> None:
    """A middle-dim mean whose wide strided rows make too few programs (63 and 45 of 2 rows; c = 4 and 8 columns in
    chunks of 1): the partial kernel reduces each tile's column chunks, the combine kernel each row's partials."""
    path = synthetic(tmp_path, "middle_dim_mean")
    problem = load_problem(path)
    family = TEMPLATES["rowwise"]
    plan = family.match(problem, trace(problem, import_problem(path)))
    params = {"num_warps": 4, "max_block_d": 8, "min_tile": 2, "strided_rows": 2, "strided_block_d": 1,
              "split_below": 256}
    source = family.render(plan, params)
    assert "_kf_launch(_kf_rows_partial, (_kf_cdiv(rows, 2), splits), " in source and "BLOCK_D=1, " in source
    assert "_kf_launch(_kf_row_looped, (rows,), " in source and "BLOCK_D=8, num_warps=4)" in source  # its own chunk
    assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="rowwise",
                                                                       params=params)), path, tmp_path)


def test_a_per_channel_operand_is_loaded_once_per_column_of_a_tile() -> None:
    """29_channel_layernorm's multi-row tile (pixels x channels) loads its weight and bias as [1, BLOCK_D]."""
    path = next(p for p in PROBLEMS if p.stem == "29_channel_layernorm")
    problem = load_problem(path)
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, import_problem(path)))
    params = TEMPLATES["rowwise"].variants(plan)[0]
    assert params["tile_warps"] == rowwise.STRIDED_WARPS and params["min_tile"] == rowwise.STRIDED_TILE
    tiled = TEMPLATES["rowwise"].render(plan, params).split("def _kf_rows_resident")[1].split("@triton.jit")[0]
    assert tiled.count("mask=col_mask") == 2 and tiled.count("mask=mask") == 2, tiled  # x's load and the store


def test_a_bool_input_stays_a_bool_condition(tmp_path: Path) -> None:
    """masked_fill's mask, a bool tensor loaded as float32, is compared with 0 before a where reads it: Triton warns
    that a where on a float condition will be an error."""
    path = synthetic(tmp_path, "masked_softmax")
    problem = load_problem(path)
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, import_problem(path)))
    params = TEMPLATES["rowwise"].variants(plan)[0]
    source = TEMPLATES["rowwise"].render(plan, params)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="rowwise",
                                                                           params=params)), path, tmp_path)


def test_rows_of_the_last_dim_are_not_strided(tmp_path: Path) -> None:
    problem = load_problem(path := synthetic(tmp_path, "groupnorm"))
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, import_problem(path)))
    assert not rowwise.strided(plan.program) and not any("strided_rows" in v for v in TEMPLATES["rowwise"].variants(plan))
    with pytest.raises(TemplateMismatch, match="innermost axis kept"):
        TEMPLATES["rowwise"].render(plan, {"num_warps": 4, "max_block_d": 8, "min_tile": 4, "strided_rows": 2})


@pytest.mark.parametrize(("forward", "reason"), sorted(DECLINED.items()))
def test_what_is_not_lowered_is_named(forward: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "declined.py"
    path.write_text(PROBLEM.format(forward=forward, init="pass", args="x", inputs=X))
    problem = load_problem(path)
    with pytest.raises(TemplateMismatch, match=reason):
        lower(trace(problem, import_problem(path)))


def test_sizes_follow_the_inputs_not_the_trace(tmp_path: Path) -> None:
    """A size that a guard in forward fixed at the traced shape (LayerNorm's normalized_shape) is read from the input."""
    path = tmp_path / "layernorm.py"
    path.write_text(PROBLEM.format(forward="self.ln(x)", init="self.ln = nn.LayerNorm(w)", args="x", inputs=X)
                    .replace("return [c]", "return [w]").replace("def __init__(self, c)", "def __init__(self, w)"))
    problem = load_problem(path)
    program = lower(trace(problem, import_problem(path)))
    assert all(size.startswith(("n_", "(")) for size in program.sizes) and "9" not in program.out_shape, program


@pytest.mark.slow
@pytest.mark.parametrize("name", ["batchnorm_train", "groupnorm", "masked_softmax", "mish", "channel_softmax", "channel_argmax"])
def test_compiles_for_sm90_and_verifies(name: str, tmp_path: Path) -> None:
    path = synthetic(tmp_path, name)
    problem = load_problem(path)
    result = generate.run(GenerateRequest(problem=problem, n=4))
    candidate = next(c for c in result.candidates if c.origin.proposer == CASES[name][4])
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=candidate, problem=problem))
    assert (res.status, res.mode) == ("ok", "ahead_of_time"), res.message
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem, candidate=candidate),
                       "inline")
    assert result.status == "ok", result.message


ROOT = Path(__file__).resolve().parents[3]
AFTER_PRODUCTS = {"23_conv2d_add_bias_gelu": "elementwise", "24_conv2d_groupnorm_silu": "rowwise",
                  "25_conv2d_batchnorm_relu": "elementwise", "26_convtranspose2d_maxpool_hardtanh": "pooling",
                  "27_linear_logsumexp": "rowwise"}


@pytest.mark.parametrize("stem", sorted(AFTER_PRODUCTS))
def test_what_follows_a_library_product_is_lowered_too(stem: str, tmp_path: Path) -> None:
    """library_epilogue: the products in torch, the rest (a per-channel bias, GroupNorm with the model's own group
    count, inference BatchNorm, a max pool, a logsumexp over the features) by the family that takes it."""
    path = ROOT / "problems" / f"{stem}.py"
    problem, family = load_problem(path), TEMPLATES["library_epilogue"]
    plan = family.match(problem, trace(problem, import_problem(path)))
    assert plan.inner == AFTER_PRODUCTS[stem]
    for params in family.variants(plan)[:2]:
        source = family.render(plan, params)
        assert_matches(Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer="library_epilogue",
                                                                           params=params)), path, tmp_path)


@pytest.mark.slow
def test_conv_groupnorm_compiles_for_sm90_and_verifies(tmp_path: Path) -> None:
    path = ROOT / "problems" / "24_conv2d_groupnorm_silu.py"
    problem, family = load_problem(path), TEMPLATES["library_epilogue"]
    plan = family.match(problem, trace(problem, import_problem(path)))
    params = family.variants(plan)[0]
    candidate = Candidate.make(problem.id, "triton", family.render(plan, params),
                               Origin(kind="builtin", proposer="library_epilogue", params=params))
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=candidate, problem=problem))
    assert (res.status, res.mode) == ("ok", "ahead_of_time"), res.message
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem, candidate=candidate),
                       "inline")
    assert result.status == "ok", result.message
