"""The templates' lean launch (stages/templates/launch.py) and the launch census at Triton's launcher
(stages/harness/launches.py). The key is checked against Triton's own specialization on the CPU, and so is the census of a
direct launcher call. The launch itself runs on a GPU only: in a child process with compiled Triton (skipped
without CUDA)."""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import triton

from kernelflow.stages import generate
from kernelflow.stages.contracts import GenerateRequest
from kernelflow.stages.harness import launches
from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.templates import launch
from tests.families import WRITTEN
from tests.stages.harness.test_integrity import needs_gpu

ROOT = Path(__file__).resolve().parents[3]


def _helper() -> dict:
    namespace = {"torch": torch, "triton": triton}
    exec(launch.SOURCE, namespace)
    return namespace


def test_the_key_is_at_least_as_fine_as_tritons_specialization() -> None:
    """Two arguments with the same key part get the same specialization from Triton (native_specialize_impl, what the
    JIT's binder calls), for pointers of several dtypes and alignments and for ints around 1, 16 and the widths."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    backend, arg = CUDABackend(GPUTarget("cuda", 90, 32)), _helper()["_kf_arg"]
    base = torch.zeros(64)
    pool = [base, base[4:], base[1:], base[5:], base.to(torch.bfloat16), base.to(torch.bfloat16)[8:],
            base.to(torch.bfloat16)[1:], base.to(torch.int32), 0, 1, 2, 15, 16, 17, 32, -16, -1, 2**31 - 1, 2**31,
            -2**31, -2**31 - 1, 2**40, 2**63 - 1, 2**63, True, False, 0.0, 1.0, 1.5, None]
    for a, b in itertools.product(pool, repeat=2):
        if arg(a) == arg(b):
            assert native_specialize_impl(backend, a, False, True, True) == \
                native_specialize_impl(backend, b, False, True, True), (a, b)
    with pytest.raises(TypeError):
        arg((1, 2))  # another type: the JIT's launch, never cached


def test_the_integer_helpers_are_tritons() -> None:
    helper = _helper()
    for n in [*range(0, 300), *(2**k + d for k in range(1, 40) for d in (-1, 0, 1))]:
        assert helper["_kf_pow2"](n) == max(1, triton.next_power_of_2(n)), n
        for b in (1, 2, 3, 16, 1000, 16384):
            assert helper["_kf_cdiv"](n, b) == triton.cdiv(n, b), (n, b)


def test_every_templates_candidate_launches_through_it() -> None:
    """Each family's candidate carries the helper once and launches every kernel through it, none by `kernel[grid]`;
    its forward calls none of the host-costly helpers (triton.cdiv, triton.next_power_of_2, torch.empty with a device
    argument: forward_lines.py's measurements in stages/templates/launch.py)."""
    families = set()
    for path in sorted((ROOT / "problems").glob("*.py")):
        for cand in generate.run(GenerateRequest(problem=load_problem(path), n=1, families=WRITTEN)).candidates:
            families.add(cand.origin.proposer)
            assert cand.source.count(launch.SOURCE) == 1, cand.origin.proposer
            forward = cand.source[cand.source.index("class ModelNew"):]
            jitted = set(re.findall(r"@triton\.jit\s*\ndef (\w+)\(", cand.source))
            launched = set(re.findall(r"_kf_launch\((\w+),", forward))
            assert launched and launched <= jitted, forward
            assert not any(re.search(rf"\b{name}\[", forward) for name in jitted), forward
            assert not re.search(r"triton\.(cdiv|next_power_of_2)\(|torch\.empty\(", forward), forward
    assert families >= {"elementwise", "rowwise", "scan", "matmul", "library_epilogue", "loss", "attention"}, families


def test_the_census_counts_a_direct_call_of_the_launcher_and_ghost_replay_skips_it() -> None:
    """The lean launch calls CompiledKernel.run itself, past the JIT: the census counts it there, and inside ghost()
    the launcher is not called."""
    from triton.compiler.compiler import CompiledKernel

    launches.install_counters(triton=True)
    called: list[tuple] = []
    kernel = CompiledKernel.__new__(CompiledKernel)
    kernel._run = lambda *args: called.append(args)  # what _init_handles sets: the driver's launcher
    before, suppressed = launches.count(), launches.suppressed()
    kernel.run(1, 1, 1, 0, None)
    assert (launches.count() - before, len(called)) == (1, 1)
    with launches.ghost():
        kernel.run(1, 1, 1, 0, None)
    assert (launches.count() - before, launches.suppressed() - suppressed, len(called)) == (1, 1, 1)


def test_replacing_the_census_at_the_launcher_is_a_cheat(tmp_path: Path) -> None:
    """The census is a property (CompiledKernel.run); the guard watches properties, so a candidate that puts the
    uncounted launcher back is named, and the census is put back."""
    from triton.compiler.compiler import CompiledKernel

    from kernelflow.stages.errors import CandidateFault
    from kernelflow.stages.harness.integrity import Guard

    guard = Guard(tmp_path, "import triton")
    counted = vars(CompiledKernel)["run"]
    with pytest.raises(CandidateFault, match="CompiledKernel.run"), guard.section("a call"):
        setattr(CompiledKernel, "run", property(lambda self: self._run))  # noqa: B010  (as a cheat would)
    assert vars(CompiledKernel)["run"] is counted


@needs_gpu
def test_on_the_gpu_the_lean_launch_matches_the_jit_and_keeps_every_check(tmp_path: Path) -> None:
    """tests/fixtures/lean_launch_check.py in a process of its own with compiled Triton: candidates of three families
    (two launches a call: elementwise's full blocks and tail, rowwise's split rows and combine; one: layernorm's
    resident row) give the JIT's output bitwise on later calls, through the kept kernels (the JIT is entered once
    per key); a misaligned input is a key of its own and still right; the census counts every launch and ghost
    replay skips them; a launch hook sees the kept path's launches."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "lean_launch_check.py"), str(tmp_path)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failures"] == [], report
