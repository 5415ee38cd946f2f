"""Prompts render with StrictUndefined for every purpose and backend; the few-shot examples are runnable modules
that verify against their problem and are timed (Triton on CPU through the interpreter; CUDA/CuTe on a GPU)."""

from __future__ import annotations

from pathlib import Path

import jinja2
import pytest
import torch

from kernelflow.stages.contracts import (
    BenchmarkRequest,
    Candidate,
    Failure,
    GenerateRequest,
    Incumbent,
    Origin,
    VerifyRequest,
)
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.llm.prompts import EXAMPLES, PROMPTS, messages, render_prompt
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_PROBLEMS = {"triton_softmax.py": "01_softmax", "cuda_silu.py": "09_silu",
                    "cute_gemm_scale_residual.py": "12_matmul_scale_residual"}


def _request(**fields) -> GenerateRequest:
    return GenerateRequest(problem=load_problem(ROOT / "problems" / "01_softmax.py"), n=1, **fields)


@pytest.mark.parametrize("backend", ["triton", "cuda", "cute"])
def test_every_purpose_renders_for_every_backend(backend: str) -> None:
    parent = Candidate.make("01_softmax", backend, "class ModelNew: ...", Origin(kind="user", proposer="test"))
    failure = Failure(stage="verify", kind="mismatch", message="gpu0 trial 0: output 0 off by 3.1x the tolerance")
    init = messages("init", _request(), backend)
    assert [m["role"] for m in init] == ["system", "user"] and "torch.softmax(x, dim=-1)" in init[1]["content"]
    assert "no TF32" in init[1]["content"] and "132 SMs" in init[1]["content"]
    diagnose = messages("debug_diagnose", _request(parent=parent, parent_failure=failure), backend)[1]["content"]
    assert "off by 3.1x" in diagnose and "do not propose simplifying" in diagnose
    patch = messages("debug_patch", _request(parent=parent, parent_failure=failure), backend, diagnosis="the mask")
    assert "<<<<<<< SEARCH" in patch[-1]["content"] and "the mask" in patch[-1]["content"]
    optimize = messages("optimize", _request(parent=parent, feedback="1. [dram_excess ...]", lessons=["BLOCK 4096 hurt"],
                                             parent_speedup_vs_eager=1.25), backend)[1]["content"]
    assert "1.250x eager" in optimize and "dram_excess" in optimize and "BLOCK 4096 hurt" in optimize


def test_the_best_so_far_is_the_kernel_to_beat_with_its_times_and_profile() -> None:
    seed = Candidate.make("01_softmax", "triton", "class ModelNew: ...  # rowwise seed", Origin(
        kind="builtin", proposer="rowwise", params={"BLOCK": 1024}))
    best = Incumbent(candidate=seed, device="cuda", speedup_vs_eager=1.42, feedback="1. [dram_excess] reads twice",
                     medians_us={"gpu0": {"candidate": 512.25, "eager": 730.0, "compile": 600.5}})
    init = messages("init", _request(incumbent=best), "cuda")[1]["content"]
    assert "# The kernel to beat" in init and "# rowwise seed" in init and "1.420x eager" in init
    assert "- gpu0 {'batch_size': 32768, 'dim': 8192}: 512.2 us (eager 730.0 us, compile 600.5 us)" in init, init
    assert "reads twice" in init and "(interpreted" not in init
    assert "# The kernel to beat" not in messages("init", _request(), "cuda")[1]["content"]
    same = messages("optimize", _request(parent=seed, incumbent=best), "triton")[1]["content"]
    assert "Its median time per call on cuda:\n- gpu0" in same and "to beat" not in same
    other = Candidate.make("01_softmax", "triton", "class ModelNew: ...  # another", Origin(kind="llm", proposer="llm"))
    elsewhere = messages("optimize", _request(parent=other, incumbent=best), "triton")[1]["content"]
    assert "# The best verified kernel so far, to beat (1.420x eager PyTorch, builtin rowwise)" in elsewhere
    assert "512.2 us" in elsewhere and "# rowwise seed" not in elsewhere


def test_the_policy_says_which_fp32_products_may_use_tf32() -> None:
    from kernelflow.stages.contracts import Policy
    from kernelflow.stages.llm.prompts import _policy

    assert "fp32 convolution through cuDNN (torch conv) runs in TF32" in _policy(Policy())
    assert "fp32 convolution must stay IEEE fp32 too" in _policy(Policy(conv_tf32=False))
    assert "fp32 matmul and convolution may use TF32" in _policy(Policy(allow_tf32=True))


def test_a_missing_variable_is_an_error_not_an_empty_string() -> None:
    with pytest.raises(jinja2.UndefinedError):
        render_prompt("debug_patch.j2", parent=None)


def test_every_example_file_is_offered_and_has_a_problem() -> None:
    files = {p.name for p in (PROMPTS / "examples").glob("*.py")}
    assert files == {name for names in EXAMPLES.values() for name in names} == set(EXAMPLE_PROBLEMS)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXAMPLE_PROBLEMS))
def test_examples_verify_and_are_timed(name: str, tmp_path: Path) -> None:
    backend = next(b for b, names in EXAMPLES.items() if name in names)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if backend != "triton" and device == "cpu":
        pytest.skip("C++ examples run only on a GPU (their compile is tested in test_compile / test_cute)")
    problem = load_problem(ROOT / "problems" / f"{EXAMPLE_PROBLEMS[name]}.py")
    cand = Candidate.make(problem.id, backend, (PROMPTS / "examples" / name).read_text(),
                          Origin(kind="user", proposer="example"))
    common = dict(workdir=str(tmp_path / "w"), problem=problem, candidate=cand,
                  device=device)
    checked = run_stage("verify", VerifyRequest(**common, sizes=[device] if device == "cpu" else ["cpu", "gpu"]))
    assert checked.status == "ok", checked.message
    timed = run_stage("benchmark", BenchmarkRequest(**common, sizes="cpu" if device == "cpu" else "gpu",
                                                    baselines=["eager"], min_reps=3,
                                                    max_reps=5, budget_s=5.0))
    assert timed.status == "ok" and timed.speedup_vs_eager is not None, timed.message


@pytest.mark.slow
def test_the_triton_examples_looped_rows_verify(tmp_path: Path) -> None:
    """The CPU shapes fit one block; with 64-wide blocks they take the two-pass path for long rows."""
    problem = load_problem(ROOT / "problems" / "01_softmax.py")
    source = (PROMPTS / "examples" / "triton_softmax.py").read_text()
    assert "MAX_BLOCK = 16384" in source
    cand = Candidate.make(problem.id, "triton", source.replace("MAX_BLOCK = 16384", "MAX_BLOCK = 64"),
                          Origin(kind="user", proposer="example"))
    checked = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "w"), problem=problem, candidate=cand))
    assert checked.status == "ok", checked.message
