"""Verify accepts a right candidate and rejects each adversarial fixture with the right reason."""

import sys
import threading
from pathlib import Path

import pytest
import torch
from torch import nn

from kernelflow.stages.contracts import Candidate, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.fx_trace import trace_with_shapes
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "adversarial"
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")
# The fixtures are plain-PyTorch stand-ins for kernels, so the campaign's policy lets torch ops compute
# (tests/stages/harness/test_library_policy.py tests that the default policy rejects them).
TORCH_COMPUTE = SOFTMAX.policy.model_copy(update={"allow_torch_compute": True})

EXPECTED = {
    "good": None,
    "all_zero": "all_zero",
    "partial": "nan",  # unwritten rows keep the NaN poison
    "input_mutation": "input_mutation",
    "nan": "nan",
    "wrong": "mismatch",
    "lazy_subclass": "cheat",
    "flaky": "mismatch",  # the second call on the same inputs disagrees
    "raises": "runtime_error",
    "oom": "oom",
    "bad_signature": "signature_mismatch",
    "no_model": "import_error",
    "syntax_error": "import_error",
    "exit_crash": "crash",
    "exit_forges_result": "crash",
    "segfault": "crash",
    "hang": "timeout",
}
SUBPROCESS_ONLY = {"exit_crash", "exit_forges_result", "segfault", "hang"}


def verify(name: str, tmp_path: Path, mode: str, source: str | None = None):
    source = source or (ROOT / "prompts" / "examples" / "triton_softmax.py" if name == "triton"
                        else FIXTURES / f"{name}.py").read_text()
    backend = "triton" if name == "triton" else "torch"
    candidate = Candidate.make(SOFTMAX.id, backend, source, Origin(kind="user", proposer="fixture"))
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=SOFTMAX,
                            candidate=candidate, policy=TORCH_COMPUTE, timeout_s=15 if name == "hang" else 120)
    return run_stage("verify", request, mode)  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_verdict_in_subprocess(name: str, tmp_path: Path):
    result = verify(name, tmp_path, "subprocess")
    assert (result.status, result.failure_kind) == (("ok", None) if EXPECTED[name] is None else ("failed", EXPECTED[name])), result.message
    assert result.files, "every verdict keeps a log"


@pytest.mark.parametrize("name", sorted(set(EXPECTED) - SUBPROCESS_ONLY))
def test_verdict_inline_matches(name: str, tmp_path: Path):
    assert verify(name, tmp_path, "inline").failure_kind == EXPECTED[name]


@pytest.mark.slow
def test_an_inline_verify_waits_for_a_trace_in_another_thread(tmp_path: Path):
    """While torch.fx traces, nn.Module.__call__ is the tracer's in every thread (stages/problems/fx_trace.py): a reference
    called then raised "module is not installed as a submodule" (a CI run, multi-agent search, inline stages). The
    trace here holds the patch until the verify has finished, or for 5 s: a verify that does not wait runs under it."""
    entered, finished, original = threading.Event(), threading.Event(), nn.Module.__call__

    class Holds(nn.Module):
        def forward(self, x):
            entered.set()
            finished.wait(5)
            return x + 1

    tracer = threading.Thread(target=trace_with_shapes, args=(Holds(), [torch.zeros(2)]))
    tracer.start()
    assert entered.wait(30), "the trace did not start"
    outcome: list[object] = []

    def verify_beside() -> None:
        try:
            outcome.append(verify("good", tmp_path, "inline"))
        except Exception as e:  # noqa: BLE001 - the failure this test is about
            outcome.append(e)
        finished.set()

    verifier = threading.Thread(target=verify_beside)
    verifier.start()
    verifier.join(180)
    tracer.join(10)
    assert not isinstance(outcome[0], Exception), f"the verify ran under the tracer: {outcome[0]!r}"
    assert outcome[0].status == "ok", outcome[0].message  # type: ignore[attr-defined]
    assert nn.Module.__call__ is original


def test_crash_keeps_the_log(tmp_path: Path):
    result = verify("segfault", tmp_path, "subprocess")
    log = (tmp_path / "work" / result.files["stage_log"]).read_text()
    assert "SIGSEGV" in result.message and "Fatal Python error" in log
    assert result.message.startswith("the candidate ended the process (killed by signal SIGSEGV) during cpu0 trial 0 "
                                     "(declared inputs) call 1. Log tail:"), result.message


@pytest.mark.parametrize("status", [0, 3])
def test_a_candidate_that_calls_os_exit_is_named(tmp_path: Path, status: int):
    """os._exit raises no audit event and leaves an empty log: the stage process's phase file names the call and
    the section (stages/phase.py). Status 3 is the stage's own INFRA_EXIT, which from candidate code is the
    candidate's crash, not an infrastructure fault to retry."""
    source = (FIXTURES / "exit_crash.py").read_text().replace("os._exit(0)", f"os._exit({status})")
    result = verify("exit_crash", tmp_path, "subprocess", source)
    named = f"the candidate ended the process with os._exit({status}) during cpu0 trial 0 (declared inputs) call 1"
    # the log holds only what torch itself wrote, if anything (on a GPU host, cpp_extension's note that a CPU
    # request's process finds no CUDA runtime)
    assert result.failure_kind == "crash" and result.message.startswith(named), result.message
    tail = result.message.removeprefix(named)
    assert tail == "; the log is empty" or ("candidate" not in tail and tail.startswith(". Log tail:")), tail


def test_a_system_exit_ends_the_stage_without_its_teardown(tmp_path: Path):
    """exit_forges_result raises SystemExit from its forward, having registered an atexit hook that writes a passing
    result where the stage writes its own: the stage process ends by os._exit, so the hook never runs."""
    result = verify("exit_forges_result", tmp_path, "subprocess")
    assert result.failure_kind == "crash", result.message
    assert result.message.startswith("the candidate ended the process with SystemExit(0) during cpu0 trial 0")
    assert not (tmp_path / "work" / "verify.result.json").exists()


def test_good_candidate_reports_error_ratio(tmp_path: Path):
    result = verify("good", tmp_path, "inline")
    assert result.trials_passed == 5 * len(SOFTMAX.cpu_workloads) and 0 <= result.max_err_ratio <= 1


def test_verify_restores_torch_settings_for_the_stages_after_it(tmp_path: Path):
    """Inline, verify shares its process with what follows: determinism and NaN-filled allocations end with it."""
    import torch

    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    assert verify("good", tmp_path, "inline").status == "ok"
    assert (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory) == before


def test_an_inline_stage_leaves_no_candidate_module_behind(tmp_path: Path, monkeypatch):
    """Inline, the flow process would keep every candidate's module (BENCHMARKS.md, "Load": +55 kB per candidate);
    each stage call imports its candidate afresh, so the module is dropped when the call returns, and freed, with
    its functions and its source."""
    import gc
    import linecache
    import types
    import weakref

    from kernelflow.stages.harness import candidate as candidate_module

    imported: list[weakref.ref] = []
    functions: list[weakref.ref] = []  # the module's functions, Triton kernels' own (their .fn) included
    files: list[str] = []
    real = candidate_module.import_file

    def spy(path: Path, name: str) -> types.ModuleType:
        module = real(path, name)
        imported.append(weakref.ref(module))
        files.append(str(path))
        functions.extend(weakref.ref(f) for v in vars(module).values()
                         if isinstance(f := getattr(v, "fn", v), types.FunctionType) and f.__module__ == name)
        return module

    monkeypatch.setattr(candidate_module, "import_file", spy)
    for name in ("good", "wrong", "triton"):  # the Triton example: Triton's interpreter runs it here
        verify(name, tmp_path / name, "inline")
        # this test's candidates only: stages called directly by earlier tests (no executor) may have left theirs
        assert not [ref for ref in imported if (m := ref()) is not None and sys.modules.get(m.__name__) is m]
    gc.collect()
    assert len(imported) >= 2 and all(ref() is None for ref in imported)
    # nor its code: Triton's interpreter kept its kernels and linecache its source (+55 kB per candidate in all)
    assert functions and all(ref() is None for ref in functions), [ref() for ref in functions if ref()]
    assert not [f for f in files if f in linecache.cache]


@pytest.mark.slow
def test_a_verify_process_does_not_load_dynamo(tmp_path: Path):
    """Dynamo's import (torch._dynamo, through torch._inductor.config or torch's wrapper of a dispatch mode) was
    3.8 of a verify's 6.6 s on the H200's host; nothing a verification does needs it (BENCHMARKS.md, "Stage process
    overhead")."""
    import subprocess

    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
              "from tests.stages.test_verify import verify; "
              "r = verify('good', Path(sys.argv[2]), 'inline'); assert r.status == 'ok', r.message; "
              "print(sorted(m for m in ('torch._dynamo', 'torch._inductor') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", script, str(ROOT), str(tmp_path)], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_census_counts_under_dynamo_once_dynamo_is_loaded():
    """With dynamo loaded, the census counts through dynamo's disable (as torch's own wrapper of a mode would), also
    the ops of a compiled function run while it is active."""
    import torch
    import torch._dynamo  # noqa: F401

    from kernelflow.stages.harness.library_policy import Census

    compiled = torch.compile(lambda x: (x * 2).sin(), backend="eager")
    with Census() as census:
        compiled(torch.ones(3)) + 1
    assert {op: census.counts[op] for op in ("aten.mul", "aten.sin", "aten.add")} == \
        {"aten.mul": 1, "aten.sin": 1, "aten.add": 1}


CUMSUM = '''"""A running sum along a long row: eager's fp32 output is correctly rounded (CPU accumulates in double), still
off the float64 reference by more than a tolerance below fp32's own rounding."""

import torch
import torch.nn as nn

n = 2048


class Model(nn.Module):
    def forward(self, x):
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(4, n)]


def get_init_inputs():
    return []


WORKLOADS = {"gpu": [dict(n=4096)], "cpu": [dict(n=2048)]}
TOLERANCE = {"rtol": %(tol)s, "atol": %(tol)s}
'''
AS_EAGER = "return x.double().cumsum(-1).float()"  # eager's own precision: a double accumulator, rounded once
ELEVEN_TIMES_EAGER = "c = x.cumsum(-1).double()\n        return (c + 10 * (c - x.double().cumsum(-1))).float()"
PAST_TOLERANCE = ("c = x.cumsum(-1)\n        return c + 1.2 * (1e-4 * c.pow(2).mean().sqrt() + 1e-4 * c.abs())")


def verify_cumsum(tmp_path: Path, tol: float, body: str):
    path = tmp_path / "running_sum.py"
    path.write_text(CUMSUM % {"tol": tol})
    problem = load_problem(path)
    source = f"import torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        {body}\n"
    candidate = Candidate.make(problem.id, "torch", source, Origin(kind="user", proposer="test"))
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=problem, candidate=candidate,
                            policy=problem.policy.model_copy(update={"allow_torch_compute": True}))
    result = run_stage("verify", request, "inline")
    return result, (tmp_path / "work" / result.files["verify_log"]).read_text()


def test_where_eager_misses_the_tolerance_a_candidate_as_accurate_passes_and_the_log_says_why(tmp_path: Path):
    result, log = verify_cumsum(tmp_path, 1e-8, AS_EAGER)
    assert result.status == "ok" and result.eager_err_ratio > 1 and 1 < result.max_err_ratio <= 2 * result.eager_err_ratio, result.message
    assert "tolerance widened to eager's own error x2: eager is" in log and "x off the problem's tolerance" in log


def test_where_eager_misses_the_tolerance_a_candidate_far_worse_than_eager_is_a_mismatch_naming_the_bound(tmp_path: Path):
    result, _ = verify_cumsum(tmp_path, 1e-8, ELEVEN_TIMES_EAGER)
    assert result.failure_kind == "mismatch" and "tolerance widened to eager's own error x2" in result.message \
        and "so the bound is" in result.message, result.message


def test_where_eager_meets_the_tolerance_a_candidate_just_past_it_is_a_mismatch(tmp_path: Path):
    result, log = verify_cumsum(tmp_path, 1e-4, PAST_TOLERANCE)
    assert result.failure_kind == "mismatch" and "off by 1.2" in result.message, result.message
    assert "widened" not in result.message + log
