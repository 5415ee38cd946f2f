"""Family `conv`: an nn.ConvNd or nn.ConvTransposeNd as an implicit GEMM in Triton's interpreter, against the
reference at every CPU workload (the module's geometry read at each call: workloads with other init arguments run
right), several tiles, K steps and ragged edges; what it declines is named."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, CompileRequest, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch
from tests.stages.proposers.test_proposer_builtin import assert_matches

FAMILY = TEMPLATES["conv"]
SOURCE = '''
import torch
import torch.nn as nn

batch, cin, cout, size = 2, 6, 20, 9
kernel, stride, padding, dilation, groups = 3, 1, 0, 1, 1


class Model(nn.Module):
    def __init__(self, cin, cout, kernel, stride, padding, dilation, groups):
        super().__init__()
        self.conv = nn.Conv{dims}d(cin, cout, kernel, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups, bias={bias}, dtype={dtype}{more})

    def forward(self, x{extra_arg}):
        {forward}


def get_inputs():
    return [torch.randn(batch, cin, {spatial}, dtype={dtype}){extra_input}]


def get_init_inputs():
    return [cin, cout, kernel, stride, padding, dilation, groups]


WORKLOADS = {{"gpu": [dict(batch=16, cin=32, cout=64, size=64)], "cpu": [{cpu}]}}
'''
CPU = {
    1: "dict(batch=2, cin=6, cout=20, size=37), dict(batch=3, cin=4, cout=18, size=20, kernel=5, stride=2, padding=3, "
       "dilation=2, groups=2)",
    2: "dict(batch=2, cin=6, cout=20, size=9), dict(batch=1, cin=4, cout=18, size=11, kernel=2, stride=2, "
       "padding=1, dilation=2, groups=2)",
    3: "dict(batch=2, cin=3, cout=17, size=6), dict(batch=1, cin=4, cout=8, size=7, kernel=2, stride=2, padding=1, "
       "groups=4)",
}
CASES = {  # name: (dims, bias, dtype, forward, extra input)
    "conv1d": (1, True, "torch.float32", "return self.conv(x)", ""),
    "conv2d_no_bias": (2, False, "torch.float32", "return self.conv(x)", ""),
    "conv2d_epilogue": (2, True, "torch.float32", "return torch.relu(self.conv(x)) * 0.5 + r", "r"),
    "conv3d": (3, True, "torch.float32", "return self.conv(x)", ""),
    "conv2d_bf16": (2, True, "torch.bfloat16", "return self.conv(x)", ""),
    "transposed1d": (1, True, "torch.float32", "return self.conv(x)", ""),
    "transposed2d_no_bias": (2, False, "torch.float32", "return self.conv(x)", ""),
    "transposed3d": (3, True, "torch.float32", "return torch.tanh(self.conv(x))", ""),
}
TRANSPOSED = SOURCE.replace("nn.Conv{dims}d(", "nn.ConvTranspose{dims}d(")
PARAMS = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 2}


def problem_file(tmp_path: Path, name: str, dims: int, bias: bool, dtype: str, forward: str, extra: str) -> Path:
    spatial = ", ".join(["size"] * dims)
    # the residual has the output's shape at the first CPU workload's geometry (kernel 3, stride 1, no padding)
    extra_input = f", torch.randn(batch, cout, {', '.join(['size - 2'] * dims)})" if extra else ""
    cpu = CPU[dims] if not extra else "dict(batch=2, cin=6, cout=20, size=9), dict(batch=1, cin=4, cout=18, size=11)"
    path = tmp_path / f"{name}.py"
    transposed = name.startswith("transposed")  # the stride-2 workload with output padding 1
    text = TRANSPOSED.replace("dilation=dilation,", "dilation=dilation, output_padding=stride - 1,") \
        if transposed else SOURCE
    path.write_text(text.format(dims=dims, bias=bias, dtype=dtype, forward=forward, spatial=spatial, cpu=cpu,
                                extra_arg=f", {extra}" if extra else "", extra_input=extra_input, more=""))
    return path


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_convolution_matches_the_reference(name: str, tmp_path: Path) -> None:
    path = problem_file(tmp_path, name, *CASES[name])
    problem = load_problem(path)
    plan = FAMILY.match(problem, trace(problem, import_problem(path)))
    candidate = Candidate.make(name, "triton", FAMILY.render(plan, PARAMS),
                               Origin(kind="builtin", proposer="conv", params=PARAMS))
    assert_matches(candidate, path, tmp_path)


@pytest.mark.parametrize("text,forward,reason", [
    (TRANSPOSED, "return self.conv(x, output_size=[11, 11])", "unsupported convolution call"),
    (SOURCE.replace("{more}", ", padding_mode='reflect'"), "return self.conv(x)", "pads with 'reflect'"),
    (SOURCE, "return self.conv(x) + r", "broadcasts against the convolution's output"),
    (SOURCE, "return self.conv(self.conv(x)[:, :6])", "2 convolutions"),
])
def test_what_the_template_declines_is_named(text: str, forward: str, reason: str, tmp_path: Path) -> None:
    path = tmp_path / "declined.py"
    path.write_text(text.format(dims=2, bias=True, dtype="torch.float32", forward=forward, spatial="size, size",
                                cpu="dict(batch=2, cin=6, cout=20, size=9)", extra_arg=", r",
                                extra_input=", torch.randn(size - 2)", more=""))
    problem = load_problem(path)
    with pytest.raises(TemplateMismatch, match=reason):
        FAMILY.match(problem, trace(problem, import_problem(path)))


@pytest.mark.parametrize("name", ["conv1d", "conv3d", "transposed3d", pytest.param("conv2d_bf16", marks=pytest.mark.slow)])
def test_it_compiles_for_sm90_and_the_verify_stage_passes_it(name: str, tmp_path: Path) -> None:
    """The compile stage builds it for sm_90 ahead of time (no GPU); the real verify stage: every workload's trials,
    the held-out shape, the census against the policy."""
    path = problem_file(tmp_path, name, *CASES[name])
    problem = load_problem(path)
    plan = FAMILY.match(problem, trace(problem, import_problem(path)))
    candidate = Candidate.make(name, "triton", FAMILY.render(plan, FAMILY.variants(plan)[0]),
                               Origin(kind="builtin", proposer="conv", params=FAMILY.variants(plan)[0]))
    built = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=candidate,
                                                problem=problem))
    assert (built.status, built.mode) == ("ok", "ahead_of_time"), built.message
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem,
                                               candidate=candidate, device="cpu"), "inline")
    assert (result.status, result.trials_passed) == ("ok", 5 * len(problem.cpu_workloads)), result.message
    assert "held-out" in (tmp_path / "verify" / result.files["verify_log"]).read_text()
