"""Algebraic identities on lowered programs (stages/templates/identities.py): where each applies, where it does not,
and the value of each replacement against float64 torch, through Triton (the interpreter here)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import aten_ops, identities
from kernelflow.stages.templates.lowering import lower, trace
from tests.stages.templates.test_decomposed import PROBLEM, X


def _program(tmp_path: Path, forward: str):
    path = tmp_path / "identity.py"
    path.write_text(PROBLEM.format(forward=forward, init="pass", args="x", inputs=X))
    problem = load_problem(path)
    return lower(trace(problem, import_problem(path)))


def test_mish_takes_one_exponential_and_one_division(tmp_path: Path) -> None:
    program = _program(tmp_path, "F.mish(x)")
    exprs = [line.expr for line in program.lines]
    assert any(e.startswith("_kf_tanh_softplus(") for e in exprs), exprs
    assert not any(name in e for e in exprs for name in ("_kf_log1p", "_kf_tanh(", "tl.exp(")), exprs
    assert program.helpers == ("_kf_tanh_softplus",)


@pytest.mark.parametrize("forward", ["torch.tanh(F.softplus(x, threshold=5.0))", "torch.tanh(F.softplus(x, beta=2.0))",
                                     "torch.tanh(torch.log1p(torch.exp(x)))"])
def test_where_the_identity_does_not_hold_exactly_the_lines_stay(forward: str, tmp_path: Path) -> None:
    """A threshold below 9 (tanh above it is not 1 to float32), another beta, or no threshold (exp overflows)."""
    program = _program(tmp_path, forward)
    assert not any("_kf_tanh_softplus" in line.expr for line in program.lines)
    assert any("_kf_tanh(" in line.expr for line in program.lines)


def test_unread_pointwise_lines_are_dropped_and_loads_kept() -> None:
    from kernelflow.stages.templates.program import Line

    lines = [Line("v0", "elem", load=0), Line("v1", "elem", ("v0",), "tl.exp(v0)"),
             Line("v2", "elem", ("v1",), "_kf_log1p(v1)"), Line("v3", "elem", ("v0",), "v0 > 20"),
             Line("v4", "elem", ("v3", "v0", "v2"), "tl.where(v3, v0, v2)"), Line("v5", "elem", ("v4",), "_kf_tanh(v4)"),
             Line("v6", "elem", ("v0", "v5"), "v0 * v5"), Line("v7", "elem", load=1)]
    out = identities.apply(lines, "v6")
    assert [line.name for line in out] == ["v0", "v5", "v6", "v7"]
    assert out[1].expr == "_kf_tanh_softplus(v0, 20.0)" and out[1].deps == ("v0",)
    assert identities.apply(lines[:2], "v1") == lines[:2]


KERNEL = """
@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, _kf_tanh_softplus(x, 20.0), mask=offs < n)
"""


def test_tanh_softplus_matches_float64() -> None:
    """Against tanh(softplus(x)) in float64 over [-120, 120] and at the edges: within 4 float32 ulps of the value
    (relative), NaN for NaN, 0 for -inf, 1 for +inf."""
    import triton
    import triton.language as tl

    namespace = {"triton": triton, "tl": tl}
    exec(aten_ops.HELPERS["_kf_tanh_softplus"] + KERNEL, namespace)
    kernel = namespace["kernel"]

    x = torch.cat([torch.linspace(-120.0, 120.0, 20001), torch.tensor([-1e-6, 0.0, 1e-6, 19.999, 20.0, 20.001,
                                                                       float("-inf"), float("inf"), float("nan")])])
    out = torch.empty_like(x)
    kernel[(math.ceil(len(x) / 1024),)](x, out, len(x), BLOCK=1024)
    ref = torch.tanh(torch.nn.functional.softplus(x.double()))
    finite = x.isfinite()
    ulp = torch.finfo(torch.float32).eps
    assert ((out[finite].double() - ref[finite]).abs() <= 4 * ulp * ref[finite].abs() + 1e-45).all()
    assert out[-3].item() == 0.0 and out[-2].item() == 1.0 and math.isnan(out[-1].item())
