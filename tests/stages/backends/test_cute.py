"""The cute backend: the CuTe example built for sm_90a on this CPU machine, a broken CuTe source as a compile error
with nvcc's log, the CUTLASS headers found (or a clear reason), and the example verified on a GPU."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from kernelflow.stages.backends import cute
from kernelflow.stages.backends import cutlass as headers
from kernelflow.stages.backends.harvest import find_tool
from kernelflow.stages.contracts import Candidate, CompileRequest, Origin
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.harness.candidate import backend_of

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = (ROOT / "prompts" / "examples" / "cute_gemm_scale_residual.py").read_text()
PROBLEM = ROOT / "problems" / "12_matmul_scale_residual.py"
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="no nvcc: CUDA compiles cannot run")


def request(tmp_path: Path, source: str = EXAMPLE) -> CompileRequest:
    candidate = Candidate.make("12_matmul_scale_residual", backend_of(source), source,
                               Origin(kind="user", proposer="example"))
    return CompileRequest(workdir=str(tmp_path / "w"), candidate=candidate)


@pytest.mark.slow
@needs_nvcc
def test_the_example_builds_for_sm90a_with_registers_sass_and_no_spills(tmp_path):
    res = run_stage("compile", req := request(tmp_path))
    assert (res.backend, res.status, res.mode) == ("cute", "ok", "ahead_of_time"), res.message
    [kernel] = res.kernels
    assert "gemm_scale_residual" in kernel.name and 0 < kernel.registers <= 128  # __launch_bounds__(256, 2)
    assert (kernel.spill_stores_bytes, kernel.spill_loads_bytes, kernel.shared_bytes) == (0, 0, 3 * 2 * 128 * 8 * 4)
    assert kernel.sass["ffma_instructions"] > 0 and kernel.sass["ldgsts_instructions"] > 0  # FMA GEMM, cp.async
    assert ".target sm_90a" in (Path(req.workdir) / res.files["ptx:kf_example_cute_gemm_scale_residual"]).read_text()
    assert res.toolchain["cutlass"] == headers.version() and headers.include_dirs()[0] in res.toolchain["cutlass"]


@pytest.mark.slow
@needs_nvcc
def test_a_cute_syntax_error_is_a_compile_error_with_nvcc_log(tmp_path):
    res = run_stage("compile", req := request(tmp_path, EXAMPLE.replace("clear(acc);", "clear(acc)", 1)))
    assert (res.status, res.failure_kind) == ("failed", "compile_error") and 'expected a ";"' in res.message
    log = (Path(req.workdir) / res.files["log"]).read_text()
    assert f"-I{headers.include_dirs()[0]} " in log and "error" in log  # nvcc's line, on the CUTLASS headers


@pytest.mark.slow
@needs_nvcc
def test_a_missing_cute_header_is_the_candidates_error_here(tmp_path):
    """With the headers on this machine, a cute/ header that does not exist is a typo, not a deferred build."""
    res = run_stage("compile", request(tmp_path, EXAMPLE.replace("<cute/tensor.hpp>", "<cute/tensr.hpp>", 1)))
    assert (res.status, res.failure_kind) == ("failed", "compile_error") and "cute/tensr.hpp" in res.message


def test_without_cutlass_headers_the_backend_is_off_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)  # no nvidia-cutlass wheel
    res = cute.compile(request(tmp_path))  # in this process: find_spec patched here
    assert (res.status, res.failure_kind) == ("failed", "unavailable") and "pip install nvidia-cutlass" in res.message


def test_include_dirs_finds_the_wheel_or_cutlass_path(tmp_path, monkeypatch):
    monkeypatch.delenv("CUTLASS_PATH", raising=False)
    [found] = headers.include_dirs()
    assert (Path(found) / "cute" / "tensor.hpp").is_file() and (Path(found) / "cutlass" / "cutlass.h").is_file()
    (tmp_path / "include" / "cute").mkdir(parents=True)
    (tmp_path / "include" / "cute" / "tensor.hpp").write_text("")
    monkeypatch.setenv("CUTLASS_PATH", str(tmp_path))
    assert headers.include_dirs() == [str(tmp_path / "include")]
    assert headers.version() == f"unknown release ({tmp_path / 'include'})"  # no cutlass/version.h there
    (tmp_path / "include" / "cutlass").mkdir()
    (tmp_path / "include" / "cutlass" / "version.h").write_text("#define CUTLASS_MAJOR 4\n#define CUTLASS_MINOR 2\n"
                                                                "#define CUTLASS_PATCH 0 \n")
    assert headers.version() == f"4.2.0 ({tmp_path / 'include'})"


def test_backend_of_tells_cute_from_plain_cuda():
    cuda_example = (ROOT / "prompts" / "examples" / "cuda_silu.py").read_text()
    assert (backend_of(EXAMPLE), backend_of(cuda_example)) == ("cute", "cuda")

# On a GPU the example is verified against problem 12 and timed by tests/stages/llm/test_prompts.py.
