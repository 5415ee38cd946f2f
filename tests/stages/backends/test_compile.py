"""Compile stage on a CPU machine: real nvcc and Triton AOT builds for sm_90a, broken candidates as failed rows."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from kernelflow.stages.backends.harvest import find_tool, harvest_triton, parse_ptxas, triton_kernels
from kernelflow.stages.contracts import Candidate, CompileRequest, CompileResult, Origin
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import load_problem

FIXTURES = Path(__file__).parents[2] / "fixtures"
needs_nvcc = pytest.mark.skipif(find_tool("nvcc") is None, reason="no nvcc: CUDA compiles cannot run")


def compile_fixture(tmp_path: Path, name: str, backend: str, with_problem: bool = True) -> tuple:
    source = (FIXTURES / "candidates" / f"{name}.py").read_text()
    candidate = Candidate.make("add", backend, source, Origin(kind="user", proposer="fixture"))
    problem = load_problem(FIXTURES / "problems" / "add.py") if with_problem else None
    req = CompileRequest(workdir=str(tmp_path / "work"), candidate=candidate,
                         problem=problem)
    return run_stage("compile", req), req


def made(req: CompileRequest, res: CompileResult, name: str) -> bytes:
    """A file the compile made, by its name in the result."""
    return (Path(req.workdir) / res.files[name]).read_bytes()


@pytest.mark.slow
def test_triton_add_compiles_ahead_of_time_for_sm90(tmp_path):
    res, req = compile_fixture(tmp_path, "triton_add", "triton")
    assert (res.status, res.mode, [k.name for k in res.kernels]) == ("ok", "ahead_of_time", ["add_kernel"]), res.message
    assert res.kernels[0].registers > 0 and res.kernels[0].spill_stores_bytes == 0
    assert ".target sm_90a" in made(req, res, "ptx:add_kernel").decode()
    assert made(req, res, "cubin:add_kernel")[:4] == b"\x7fELF"
    assert "add_kernel" in made(req, res, "sass:add_kernel").decode()
    assert res.toolchain["triton"] and res.toolchain["torch"] and res.defined == ["add_kernel"]


@pytest.mark.slow
def test_triton_without_problem_checks_statically(tmp_path):
    res, _ = compile_fixture(tmp_path, "triton_add", "triton", with_problem=False)
    assert (res.status, res.mode, res.kernels) == ("ok", "on_gpu_worker", []) and "add_kernel" in res.message
    assert res.defined == ["add_kernel"]  # the module's own kernels, known before any launch


@pytest.mark.slow
def test_triton_type_error_in_kernel_is_compile_error_with_log(tmp_path):
    res, req = compile_fixture(tmp_path, "triton_type_error", "triton")
    assert (res.status, res.failure_kind) == ("failed", "compile_error")
    assert "invalid operands" in made(req, res, "log").decode()


@pytest.mark.slow
def test_triton_candidate_that_does_not_import_is_import_error(tmp_path):
    source = (FIXTURES / "candidates" / "triton_add.py").read_text().replace("class ModelNew", "class ModelNew(:")
    candidate = Candidate.make("add", "triton", source, Origin(kind="user", proposer="fixture"))
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "w"), candidate=candidate))
    assert (res.status, res.failure_kind) == ("failed", "import_error") and "SyntaxError" in res.message


@pytest.mark.slow
@needs_nvcc
def test_cuda_relu_builds_ptx_cubin_sass_for_inspection(tmp_path):
    res, req = compile_fixture(tmp_path, "cuda_relu", "cuda", with_problem=False)
    assert (res.status, res.mode) == ("ok", "ahead_of_time"), res.message
    assert "built by load_inline on the GPU worker" in res.message
    [kernel] = res.kernels
    assert "relu_kernel" in kernel.name and kernel.registers > 0 and kernel.spill_stores_bytes == 0
    assert ".entry _Z11relu_kernel" in made(req, res, "ptx:kf_relu").decode()
    assert "relu_kernel" in made(req, res, "sass:kf_relu").decode()
    assert res.toolchain["nvcc"].startswith("Cuda compilation tools")


@pytest.mark.slow
@needs_nvcc
def test_cuda_syntax_error_is_compile_error_with_nvcc_log(tmp_path):
    res, req = compile_fixture(tmp_path, "cuda_syntax_error", "cuda", with_problem=False)
    assert (res.status, res.failure_kind) == ("failed", "compile_error") and 'expected a ";"' in res.message
    assert "error" in made(req, res, "log").decode()


def test_parse_ptxas_reads_registers_spills_stack_and_smem():
    log = """ptxas info    : Compiling entry function '_Z1kPf' for 'sm_90a'
ptxas info    : Function properties for _Z1kPf
    16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 360 bytes cmem[0]"""
    [row] = parse_ptxas(log)
    assert (row.name, row.registers, row.shared_bytes, row.stack_bytes, row.spill_stores_bytes,
            row.spill_loads_bytes) == ("_Z1kPf", 40, 2048, 16, 8, 4)


def _never_launched(x_ptr):
    pass


def test_harvest_triton_with_nothing_compiled_is_empty(tmp_path):
    # built directly: conftest puts @triton.jit in interpreter mode
    from triton.runtime.jit import JITFunction

    module = types.ModuleType("kf_uncompiled")
    module.kernel = JITFunction(_never_launched)
    assert list(triton_kernels(module)) == ["_never_launched"]
    assert harvest_triton(module, CompileRequest(workdir=str(tmp_path), candidate=Candidate.make(
        "add", "triton", "", Origin(kind="user", proposer="fixture")))) == ([], {})


def test_without_nvcc_the_cuda_backend_is_off_with_the_reason(tmp_path, monkeypatch):
    from kernelflow.stages.backends import cuda

    monkeypatch.setattr(cuda, "find_tool", lambda name: None)  # no toolkit anywhere (in this process: no subprocess)
    source = (FIXTURES / "candidates" / "cuda_relu.py").read_text()
    candidate = Candidate.make("add", "cuda", source, Origin(kind="user", proposer="fixture"))
    res = cuda.compile(CompileRequest(workdir=str(tmp_path / "w"), candidate=candidate))
    assert (res.status, res.failure_kind) == ("failed", "unavailable") and "nvcc not found" in res.message


@pytest.mark.slow
@pytest.mark.parametrize(("header", "verdict"), [("relu_helpers.cuh", ("failed", "compile_error")),
                                                  ("cutlass/not_a_real_cutlass_header.h", ("ok", None))])
def test_only_library_headers_are_left_to_the_gpu_worker(tmp_path, header, verdict):
    """A typo'd or unshipped header fails here; a library header absent on this machine defers to the GPU worker."""
    source = (FIXTURES / "candidates" / "cuda_relu.py").read_text().replace(
        'cuda_source = r"""\n', f'cuda_source = r"""\n#include "{header}"\n', 1)
    candidate = Candidate.make("relu", "cuda", source, Origin(kind="user", proposer="fixture"))
    res = run_stage("compile", CompileRequest(workdir=str(tmp_path / "w"), candidate=candidate))
    assert (res.status, res.failure_kind) == verdict, res.message
    assert header in res.message
