"""The compile stage's capture runs candidate code (its import, constructor and forward on meta tensors) contained as
verify does: guarded, confined to its work dir, within a deadline sized to the work and a memory limit; what that code
did is the candidate's fault. Fixtures: tests/fixtures/capture/, each a `hostile()` that the honest Triton add
(tests/fixtures/candidates/triton_add.py) calls first in its forward."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, CompileRequest, CompileResult, Origin
from kernelflow.stages.executors import landlock
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.executors.sandbox import Sandbox
from kernelflow.stages.problems.kernelbench import load_problem

pytestmark = pytest.mark.slow  # each compile starts a process that imports torch and Triton
FIXTURES = Path(__file__).parents[2] / "fixtures"
FORWARD = "    def forward(self, a, b):\n"
needs_landlock = pytest.mark.skipif(landlock.abi() == 0, reason="this kernel has no Landlock")


def capture(tmp_path: Path, name: str, sandbox: Sandbox | None = None, **fields) -> CompileResult:
    honest = (FIXTURES / "candidates" / "triton_add.py").read_text()
    assert FORWARD in honest
    source = (FIXTURES / "capture" / f"{name}.py").read_text() + honest.replace(FORWARD, FORWARD + "        hostile()\n")
    candidate = Candidate.make("add", "triton", source, Origin(kind="user", proposer="fixture"))
    req = CompileRequest(workdir=str(tmp_path / "work"), candidate=candidate,
                         problem=load_problem(FIXTURES / "problems" / "add.py"), **fields)
    return run_stage("compile", req, sandbox or Sandbox())


def test_a_write_outside_the_work_dir_during_capture_is_a_cheat_and_never_happens(tmp_path):
    res = capture(tmp_path, "write_outside")
    assert (res.status, res.failure_kind) == ("failed", "cheat"), res.message
    assert "capture gpu0 on meta tensors: forward" in res.message and "tried to write" in res.message
    assert not (tmp_path / "escaped.txt").exists()


@needs_landlock
def test_a_write_through_libc_is_refused_by_the_kernel(tmp_path):
    """No audit hook sees a write made through ctypes: the stage process's Landlock ruleset refuses it."""
    res = capture(tmp_path, "ctypes_write")
    assert not (tmp_path / "escaped_by_libc.txt").exists()
    assert res.sandbox["files"].startswith("applied: Landlock"), res.sandbox
    assert res.status == "ok", res.message  # it carried on: nothing to judge but nothing happened


def test_home_is_a_throwaway_directory_of_the_call(tmp_path):
    probe = Path.home() / "kernelflow-capture-home-probe.txt"
    probe.unlink(missing_ok=True)
    res = capture(tmp_path, "home_write")
    assert res.status == "ok", res.message  # inside its own work dir: allowed
    assert not probe.exists() and res.sandbox["home"].startswith("applied: HOME=")
    assert not (tmp_path / "work" / "compile.home").exists()  # removed after the call


def imported_address_space() -> int:
    """Bytes of address space a process holds once torch and Triton are imported: a CUDA build of torch maps
    several GiB of libraries, a CPU build far less."""
    code = ("import torch, triton; print(next(int(line.split()[1]) for line in open('/proc/self/status') "
            "if line.startswith('VmPeak:')) * 1024)")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_a_memory_bomb_in_the_forward_is_the_candidates_oom(tmp_path):
    """Under an address-space limit 2 GiB above what the imports take (which also protects the machine running the
    test)."""
    limit = imported_address_space() + (2 << 30)
    res = capture(tmp_path, "memory_bomb", Sandbox(memory_bytes=limit))
    assert (res.status, res.failure_kind) == ("failed", "oom"), res.message
    assert "forward" in res.message and "MemoryError" in res.message and str(limit) in res.message


def test_the_executor_ends_a_call_whose_processes_hold_too_much_memory(tmp_path):
    """Where no address-space limit stops it first (a GPU request has none), the executor's watch does."""
    res = capture(tmp_path, "memory_bomb", Sandbox(memory_bytes=64 << 30, resident_bytes=1 << 30))
    assert (res.status, res.failure_kind) == ("failed", "oom"), res.message
    assert "resident memory" in res.message and "over its limit of 1.00 GiB" in res.message


def test_a_forward_that_never_returns_meets_the_capture_deadline_not_the_stage_one(tmp_path):
    res = capture(tmp_path, "sleeps", candidate_code_s=3.0, timeout_s=120.0)
    assert (res.status, res.failure_kind) == ("failed", "timeout"), res.message
    assert "forward ran past its 3 s deadline" in res.message and res.duration_s < 60
