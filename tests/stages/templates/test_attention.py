"""Family `attention`: a flash-attention forward for scaled_dot_product_attention and its written-out form.
Every variant matches the reference at the CPU workloads (Triton's interpreter), causal and not; the kernel builds
ahead of time for sm_90a with tensor-core (wgmma) instructions and no spills; verify passes; the declines say why."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_proposer_builtin import assert_matches

from kernelflow.stages.contracts import Candidate, CompileRequest, Origin, Problem, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = ROOT / "problems" / "22_attention_bf16.py"
FAMILY = TEMPLATES["attention"]
SMALL = {"BLOCK_M": 16, "BLOCK_N": 16, "num_warps": 4, "num_stages": 2}  # several row and key blocks at CPU sizes

_HEADER = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, heads, seq, dim = 2, 3, 13, 16
'''
_INPUTS = '''

def get_inputs():
    return [torch.randn(batch, heads, seq, dim, dtype=DTYPE) for _ in range(3)]


WORKLOADS = {"gpu": [dict(batch=4, heads=16, seq=2048, dim=64)],
             "cpu": [dict(batch=2, heads=3, seq=13, dim=16), dict(batch=1, heads=2, seq=37, dim=24)]}
'''


def _source(dtype: str, init: str, forward: str, init_inputs: str = "[]") -> str:
    return (_HEADER + f"DTYPE = torch.{dtype}\n\n\nclass Model(nn.Module):\n    def __init__(self{init}):\n"
            f"        super().__init__()\n{'        self.scale = scale' if init else '        pass'}\n\n"
            f"    def forward(self, q, k, v):\n{forward}\n\n\ndef get_init_inputs():\n    return {init_inputs}\n"
            + _INPUTS)


# Written-out forms and other dtypes: (source, is causal).
SYNTHETIC = {
    "explicit_triu_bf16": (_source("bfloat16", ", scale", '''        scores = torch.matmul(q, k.transpose(-2, -1)) * self.scale
        mask = torch.triu(torch.ones_like(scores, dtype=torch.bool), diagonal=1)
        return torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1) @ v''', "[dim ** -0.5]"), True),
    "explicit_tril_fp16": (_source("float16", "", '''        scores = q @ k.transpose(3, 2) / math.sqrt(dim)
        keep = q.new_ones(q.size(-2), q.size(-2)).tril()
        return F.softmax(scores.masked_fill(keep == 0, float("-inf")), dim=-1) @ v'''), True),
    "explicit_plain_bf16": (_source("bfloat16", "", '''        return torch.softmax(q @ k.transpose(-1, -2) * 0.3, dim=-1) @ v'''), False),
    "sdpa_scale_fp32": (_source("float32", "", '''        return F.scaled_dot_product_attention(q, k, v, scale=0.3)'''), False),
    "sdpa_causal_fp16": (_source("float16", "", '''        return F.scaled_dot_product_attention(q, k, v, is_causal=True)'''), True),
}
DECLINED = {
    "attn_mask": (_source("bfloat16", "", '''        mask = q[..., :1] > 0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)'''), "with an attn_mask"),
    "dropout": (_source("bfloat16", "", '''        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)'''), "with dropout"),
    "padding_mask": (_source("bfloat16", "", '''        scores = q @ k.transpose(-2, -1)
        return torch.softmax(scores.masked_fill(q[..., :1] > 0, float("-inf")), dim=-1) @ v'''), "not triu"),
    "wrong_diagonal": (_source("bfloat16", "", '''        mask = torch.ones_like(q @ k.transpose(-2, -1), dtype=torch.bool).triu(2)
        return torch.softmax((q @ k.transpose(-2, -1)).masked_fill(mask, float("-inf")), dim=-1) @ v'''),
        "diagonal 2, not the causal 1"),
    "epilogue": (_source("bfloat16", "", '''        return F.scaled_dot_product_attention(q, k, v) * 2.0'''), "more than scaled_dot_product_attention"),
}


def _problem(tmp_path: Path, name: str, source: str) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    return load_problem(path)


def _candidate(problem: Problem, params: dict) -> Candidate:
    plan = FAMILY.match(problem, trace(problem, import_problem(problem.path)))
    return Candidate.make(problem.id, "triton", FAMILY.render(plan, params),
                          Origin(kind="builtin", proposer="attention", params=params))


def verified(problem: Problem, cand: Candidate, tmp_path: Path) -> None:
    req = VerifyRequest(workdir=str(tmp_path / "verify"), problem=problem,
                        candidate=cand)
    result = run_stage("verify", req, "inline")
    assert (result.status, result.trials_passed) == ("ok", 5 * len(problem.cpu_workloads)), result.message


@pytest.mark.slow
def test_every_variant_matches_the_reference(tmp_path: Path) -> None:
    problem = load_problem(PROBLEM)
    plan = FAMILY.match(problem, trace(problem, import_problem(PROBLEM)))
    assert (plan.causal, plan.scale) == ("self.is_causal", "D ** -0.5")  # causal differs between the workloads
    for params in [*FAMILY.variants(plan), SMALL]:
        assert_matches(_candidate(problem, params), PROBLEM, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SYNTHETIC))
def test_written_out_forms_and_dtypes_match(name: str, tmp_path: Path) -> None:
    source, causal = SYNTHETIC[name]
    problem = _problem(tmp_path, name, source)
    plan = FAMILY.match(problem, trace(problem, import_problem(problem.path)))
    assert plan.causal == str(causal) and plan.half == ("fp32" not in name)
    for params in (FAMILY.variants(plan)[0], SMALL):
        verified(problem, _candidate(problem, params), tmp_path)  # against float64: eager rounds its scores


def test_a_kernel_without_the_causal_mask_fails(tmp_path: Path) -> None:
    """The checks above can see causality: the same kernel told CAUSAL=False misses the causal workloads."""
    problem = load_problem(PROBLEM)
    cand = _candidate(problem, SMALL)
    broken = cand.model_copy(update={"source": cand.source.replace("CAUSAL=bool(self.is_causal)", "CAUSAL=False")})
    with pytest.raises(AssertionError):
        assert_matches(broken, PROBLEM, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("split_p", [False, True])
@pytest.mark.parametrize("workload", [0, 1])
def test_compiles_for_sm90_with_tensor_cores(workload: int, split_p: bool, tmp_path: Path) -> None:
    """At each GPU workload (D 64 full; D 128 causal), the best guess builds ahead of time: wgmma, no spills; with
    split_p (two p v products) too."""
    problem = load_problem(PROBLEM)
    problem = problem.model_copy(update={"gpu_workloads": problem.gpu_workloads[workload:]})
    plan = FAMILY.match(problem, trace(problem, import_problem(PROBLEM)))
    compiled = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=_candidate(problem, {**FAMILY.variants(plan)[0],
                                                                               "split_p": split_p}),
                                                problem=problem))
    assert (compiled.status, compiled.mode) == ("ok", "ahead_of_time"), compiled.message
    [kernel] = compiled.kernels
    assert kernel.name.split(".")[0] == "_kf_attention" and kernel.spill_stores_bytes == 0
    assert kernel.sass is not None and kernel.sass["wgmma_instructions"], kernel.sass
    assert not compiled.library_calls


@pytest.mark.slow
def test_verifies_inline(tmp_path: Path) -> None:
    problem = load_problem(PROBLEM)
    plan = FAMILY.match(problem, trace(problem, import_problem(PROBLEM)))
    verified(problem, _candidate(problem, FAMILY.variants(plan)[0]), tmp_path)


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declines_what_it_cannot_compute(name: str, tmp_path: Path) -> None:
    source, reason = DECLINED[name]
    problem = _problem(tmp_path, name, source)
    with pytest.raises(TemplateMismatch, match=reason):
        FAMILY.match(problem, trace(problem, import_problem(problem.path)))


@pytest.mark.parametrize("stem", ["01_softmax", "10_matmul_bf16", "16_swiglu_bf16", "18_scaled_bias_softmax"])
def test_declines_other_problems(stem: str) -> None:
    problem = load_problem(ROOT / "problems" / f"{stem}.py")
    with pytest.raises(TemplateMismatch, match="not a softmax|neither scaled_dot_product_attention"):
        FAMILY.match(problem, trace(problem, import_problem(problem.path)))


@pytest.mark.slow
def test_split_p_rounds_the_probabilities_less(tmp_path: Path) -> None:
    """The second operand carries p's bf16 rounding error: the worst error over the CPU workloads falls (there the
    output's own bf16 rounding, ~0.2x the tolerance, is a floor both share)."""
    problem = load_problem(PROBLEM)
    worst = {}
    for split in (False, True):
        req = VerifyRequest(workdir=str(tmp_path / f"verify{split}"), problem=problem, candidate=_candidate(problem, {**SMALL, "split_p": split}))
        result = run_stage("verify", req, "inline")
        assert result.status == "ok", result.message
        worst[split] = result.max_err_ratio
    assert worst[True] < 0.8 * worst[False], worst
