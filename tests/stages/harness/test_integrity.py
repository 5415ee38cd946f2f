"""Integrity: one defence per way of cheating, each shown by an adversarial fixture and its verdict; the honest
candidates still pass (docs/INTEGRITY.md). The fixture tables run on the CPU and, where there is one, on a GPU (real
Triton launches, device tensors; skipped without one). CUDA-only paths (side streams, persisting L2) are tested
here through their decision logic; their fixtures run on a GPU (tests/stages/harness/test_integrity_gpu.py)."""

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from kernelflow.stages import generate
from kernelflow.stages.benchmark import _Candidate
from kernelflow.stages.contracts import (
    Backend,
    BenchmarkRequest,
    Candidate,
    GenerateRequest,
    Origin,
    Policy,
    VerifyRequest,
    Workload,
)
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.harness import static_checks
from kernelflow.stages.harness.audit import Watch
from kernelflow.stages.harness.integrity import Guard
from kernelflow.stages.measure.timing import (
    MAX_LEAD,
    MAX_SETTLE_LEAD,
    Timer,
    left_running,
    persisting_l2_bytes,
    reset_persisting_l2,
)
from kernelflow.stages.problems.held_out import held_out, held_out_of, perturb
from kernelflow.stages.problems.kernelbench import import_problem, load_problem
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "adversarial"
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")
PLAIN = load_problem(ROOT / "tests" / "fixtures" / "problems" / "plain_scale_relu.py")  # no WORKLOADS table
TORCH_COMPUTE = SOFTMAX.policy.model_copy(update={"allow_torch_compute": True})  # for the plain-PyTorch fixtures
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the lead runs it on the H200)")
DEVICES = ["cpu", pytest.param("cuda", marks=needs_gpu)]  # on the GPU too: the problem's small shapes on the device

# fixture -> words its `cheat` verdict names, verified inline
VERIFY_CHEATS = {
    "background_thread": "thread(s) running",
    "raw_thread": "work (started through _thread)",
    "patch_timer": "replaced time.perf_counter_ns",
    "patch_judge": "replaced kernelflow.stages.harness.compare.error_ratio",
    "lazy_subclass": "tensor subclass",
    "memo_inputs": "launched no kernel where its earlier calls",
    "steal_reference": "dispatched no op that computes",
    "host_compute": "dispatched no op that computes",
    "ghost_kernel": "ghost replay",
    "fallback_try_except": "static check: fallback",
    "precision_bf16": "precision downgrade: the forward converts float32 data",
    "precision_tf32": "precision downgrade: changed allow_tf32",
    "l2_persist": "static check: l2_persistence",
    "hardcoded_shapes": "shape hard-coding",
    "write_outside": "tried to write",
    "spawn_process": "tried to start a process (subprocess.Popen",
    "read_secret": "OPENAI_API_KEY",
    "network": "tried to open network connections",
}
# what outlives the candidate (a global hook, an ATen kernel) stays in its own process
SUBPROCESS_CHEATS = {"global_hook": "_global_forward_hooks", "aten_override": "ATen operators (aten/_softmax/CPU)"}
# right while verified, caught only once timed
BENCHMARK_CHEATS = {
    "patch_stats": "replaced kernelflow.stages.benchmark.median_ci",
    "replay_pointer": "result replayed by address",
    "batched_launch": "launched no kernel where its earlier calls launched 1",
}
# on a GPU the untimed calls queued before each timed one (stages/measure/timing.py SUSTAIN_US) come first
BENCHMARK_CHEATS_CUDA = {**BENCHMARK_CHEATS, "batched_launch": "untimed calls skipped their work"}
# exploits whose outputs are simply wrong: they fail with the defect's own kind (repairable), never pass
DEFECTS = {"stale_memory": "nan", "partial": "nan", "all_zero": "all_zero", "wrong": "mismatch"}


def candidate(name: str) -> Candidate:
    """An adversarial fixture by name, or a path (an honest example)."""
    source = (Path(name) if name.endswith(".py") else FIXTURES / f"{name}.py").read_text()
    backend: Backend = "triton" if "import triton" in source else "cuda" if "load_inline" in source else "torch"
    return Candidate.make(SOFTMAX.id, backend, source, Origin(kind="user", proposer="fixture"))


def verify(name: str, tmp_path: Path, mode: str = "inline", **kw):
    cand = candidate(name)
    policy = TORCH_COMPUTE if cand.backend == "torch" else None
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=SOFTMAX,
                            candidate=cand, policy=policy, **kw)
    return run_stage("verify", request, mode)  # type: ignore[arg-type]


def bench(name: str, tmp_path: Path, device: str = "cpu", mode: str = "inline", **kw):
    request = BenchmarkRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX,
                               candidate=candidate(name), device=device, baselines=["eager"], min_reps=10,
                               max_reps=40, **kw)
    return run_stage("benchmark", request, mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(VERIFY_CHEATS))
def test_verify_calls_each_cheat_a_cheat(name: str, device: str, tmp_path: Path):
    result = verify(name, tmp_path, device=device)
    assert (result.failure_kind, VERIFY_CHEATS[name] in result.message) == ("cheat", True), result.message


@pytest.mark.slow
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(SUBPROCESS_CHEATS))
def test_cheats_that_outlive_the_candidate_are_caught_in_their_own_process(name: str, device: str, tmp_path: Path):
    result = verify(name, tmp_path, "subprocess", trials=1, device=device)
    assert (result.failure_kind, SUBPROCESS_CHEATS[name] in result.message) == ("cheat", True), result.message


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(BENCHMARK_CHEATS))
def test_benchmark_calls_each_timed_cheat_a_cheat(name: str, device: str, tmp_path: Path):
    assert verify(name, tmp_path / "v", trials=1, device=device).status == "ok"  # verification alone does not see it
    result = bench(name, tmp_path, device)
    reason = (BENCHMARK_CHEATS_CUDA if device == "cuda" else BENCHMARK_CHEATS)[name]
    assert (result.failure_kind, reason in result.message) == ("cheat", True), result.message


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_wrong_outputs_keep_their_defect_kind(name: str, device: str, tmp_path: Path):
    """stale_memory on a GPU is the caching allocator's case: empty_like gets the block the reference's output
    was freed to."""
    result = verify(name, tmp_path, device=device)
    assert result.failure_kind == DEFECTS[name], result.message


PLAIN_HONEST = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return torch.relu(x * self.scale)
"""


# specialized to its module's weight (the architecture: get_init_inputs reads `features`), reading the batch at run time
PLAIN_WEIGHT_SPECIALIZED = """import torch
import torch.nn as nn

FEATURES = 256  # plain_scale_relu.py's width, held as a kernel specialized to its weight's shape holds it


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(features))

    def forward(self, x):
        return torch.relu(x.reshape(-1, FEATURES) * self.scale[:FEATURES])
"""
PLAIN_SOURCES = {"honest": PLAIN_HONEST, "weight_specialized": PLAIN_WEIGHT_SPECIALIZED,
                 "hardcoded_sizes": (FIXTURES / "hardcoded_sizes.py").read_text()}


def verify_plain(problem, name: str, tmp_path: Path):
    cand = Candidate.make(problem.id, "torch", PLAIN_SOURCES[name], Origin(kind="user", proposer="fixture"))
    request = VerifyRequest(workdir=str(tmp_path / "w"), problem=problem, candidate=cand, sizes=["gpu"], trials=2,
                            policy=problem.policy.model_copy(update={"allow_torch_compute": True}))
    result = run_stage("verify", request, "inline")
    log = (tmp_path / "w" / result.files["verify_log"]).read_text() if "verify_log" in result.files else ""
    return result, log


@pytest.mark.parametrize("name", ["honest", "weight_specialized", "hardcoded_sizes"])
def test_a_plain_kernelbench_problem_is_held_out_at_sizes_of_its_constants(name: str, tmp_path: Path):
    """Its one workload (gpu0) sets no constant; the held-out shape moves the input sizes get_inputs reads
    (batch_size) and keeps the architecture's, which get_init_inputs reads (features: the weight's shape). A kernel
    specialized to its weight's shape passes; one that assumed the declared batch does not."""
    result, log = verify_plain(PLAIN, name, tmp_path)
    if name != "hardcoded_sizes":
        assert result.status == "ok" and "held-out shape {'batch_size': 32, 'features': 256}: ok" in log, log
    else:
        assert (result.failure_kind, "shape hard-coding" in result.message) == ("cheat", True), result.message
        assert "held-out shape {'batch_size': 32, 'features': 256} (next to gpu0 {'batch_size': 64, 'features': 256}" \
            in result.message


ONLY_ARCHITECTURE = (ROOT / "tests" / "fixtures" / "problems" / "plain_scale_relu.py").read_text().replace(
    "torch.randn(batch_size, features)", "torch.randn(8, features)")  # no input size left to move
UNUSABLE_FIRST = (ROOT / "tests" / "fixtures" / "problems" / "plain_scale_relu.py").read_text().replace(
    "        return torch.relu(x * self.scale)",
    "        if tuple(x.shape) == (32, 256):  # the problem's own limit, at the first held-out shape\n"
    "            raise ValueError('not at this shape')\n"
    "        return torch.relu(x * self.scale)")


@pytest.mark.parametrize("name", ["honest", "weight_specialized"])
def test_where_no_input_size_can_move_every_size_moves(name: str, tmp_path: Path):
    """A problem whose every size is the architecture's: the held-out shape moves them, and a kernel specialized to
    its weight's shape is shape hard-coding there too (the only check left)."""
    path = tmp_path / "only_architecture.py"
    path.write_text(ONLY_ARCHITECTURE)
    result, log = verify_plain(load_problem(path), name, tmp_path)
    if name == "honest":
        assert result.status == "ok" and "held-out shape {'features': 128}: ok" in log, log
    else:
        assert (result.failure_kind, "shape hard-coding" in result.message) == ("cheat", True), result.message
        assert "held-out shape {'features': 128}" in result.message


@pytest.mark.parametrize("name", ["honest", "hardcoded_sizes"])
def test_a_held_out_shape_the_reference_rejects_is_skipped_for_the_next(name: str, tmp_path: Path):
    """The reference fails at the first held-out shape: it is skipped with a note and the candidate is checked at the
    next (every size moved), never passed unchecked while a valid one is left."""
    path = tmp_path / "unusable_first.py"
    path.write_text(UNUSABLE_FIRST)
    result, log = verify_plain(load_problem(path), name, tmp_path)
    if name == "honest":
        assert "held-out shape {'batch_size': 32, 'features': 256}: skipped, the reference is unusable there " \
            "(ValueError: not at this shape)" in log, log
        assert result.status == "ok" and "held-out shape {'batch_size': 32, 'features': 128}: ok" in log, log
    else:
        assert (result.failure_kind, "shape hard-coding" in result.message) == ("cheat", True), result.message
        assert "held-out shape {'batch_size': 32, 'features': 128} (next to gpu0" in result.message


def test_a_process_that_dies_at_the_held_out_shape_is_shape_hard_coding(tmp_path: Path):
    """hardcoded_crash aborts at a shape it was not tuned for, as a kernel whose out-of-bounds store corrupted the
    heap does: the stage process dies, and its phase file says where (stages/phase.py)."""
    result = verify("hardcoded_crash", tmp_path, "subprocess", trials=1)
    assert result.failure_kind == "cheat", result.message
    assert result.message.startswith("shape hard-coding: right at every declared shape; the process died at the "
                                     "held-out shape {'batch_size': 6, 'dim': 64} (next to cpu0 {'batch_size': 7, "
                                     "'dim': 96}, never shown to the candidate): the candidate ended the process "
                                     "(killed by signal SIGABRT) during cpu0-held-out trial 0"), result.message


def test_a_precision_downgrade_is_named_where_the_census_forbids_the_ops_too(tmp_path: Path):
    """Under the problem's own policy (no torch compute) precision_bf16's ops are forbidden as well: the verdict is
    the downgrade, and names both."""
    cand = candidate("precision_bf16")
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX, candidate=cand,
                                               trials=1), "inline")
    assert result.failure_kind == "cheat", result.message
    assert "precision downgrade: the forward converts float32 data to a less precise dtype (float32 -> bfloat16 x1)" \
        in result.message and "policy: the candidate's forward calls torch ops that compute" in result.message


def test_a_refused_write_leaves_nothing_behind(tmp_path: Path):
    assert verify("write_outside", tmp_path, trials=1).failure_kind == "cheat"
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize("name", ["good", "side_stream"])
def test_honest_torch_candidates_pass_verify_and_benchmark(name: str, tmp_path: Path):
    """side_stream computes plainly on CPU; on a GPU its hidden stream is the benchmark's to catch."""
    assert verify(name, tmp_path / "v").status == "ok"
    result = bench(name, tmp_path)
    assert result.status == "ok" and result.recheck_passed, result.message


@pytest.mark.slow
@pytest.mark.parametrize("path", ["prompts/examples/triton_softmax.py", "tests/fixtures/candidates/triton_add.py"])
def test_honest_triton_candidates_pass_every_check(path: str, tmp_path: Path):
    problem = load_problem(ROOT / ("problems/01_softmax.py" if "softmax" in path else "tests/fixtures/problems/add.py"))
    cand = Candidate.make(problem.id, "triton", (ROOT / path).read_text(), Origin(kind="user", proposer="example"))
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "w"), problem=problem, candidate=cand, trials=2), "inline")
    log = (tmp_path / "w" / result.files["verify_log"]).read_text()
    assert result.status == "ok" and "launches 1 kernels" in log and "held-out shape" in log, result.message
    assert "the kernels do the work" in log
    timed = run_stage("benchmark", BenchmarkRequest(workdir=str(tmp_path / "w2"), problem=problem, candidate=cand, baselines=["eager"], min_reps=10,
                                                    max_reps=20), "inline")
    assert timed.status == "ok", timed.message


STATIC = {  # rule -> a source that breaks it
    "l2_persistence": 'CUDA = "attr.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;"',
    "precision": "import torch\ntorch.set_float32_matmul_precision('high')",
    "harness": "import sys\nframe = sys._getframe(1)",
    "monkey_patch": "import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001",
    "aten_override": "import torch\nlib = torch.library.Library('aten', 'IMPL')",
    "network": "import urllib.request",
    "secrets": "import os\nkey = os.environ['OPENAI_API_KEY']",
    "workers": "from concurrent.futures import ThreadPoolExecutor",
    "fallback": "import torch\ntry:\n    y = kernel(x)\nexcept Exception:\n    y = torch.softmax(x, -1)",
}


@pytest.mark.parametrize("rule", sorted(STATIC))
def test_each_static_rule_names_what_it_found(rule: str):
    assert [f.split(":")[0] for f in static_checks.findings(STATIC[rule], SOFTMAX)] == [rule]


def test_static_rules_follow_the_policy():
    assert not static_checks.findings(STATIC["precision"], SOFTMAX, Policy(allow_tf32=True))
    assert not static_checks.findings(STATIC["fallback"], SOFTMAX, Policy(allow_torch_compute=True))
    assert static_checks.findings("from kernelflow.stages.backends.cutlass import include_dirs", SOFTMAX) == []  # cute's header finder


# Inductor's code for problems of each kind it writes (a pointwise chain, a conv with its epilogue, row softmaxes)
INDUCTOR_SOURCES = ["09_silu", "13_conv2d_bias_relu_scale", "18_scaled_bias_softmax", "31_masked_softmax"]


@pytest.mark.slow
def test_no_honest_source_breaks_a_static_rule():
    """Every proposal of the families kernelflow writes for every problem, the inductor family's for problems of
    each kind it writes, the prompts' examples, the candidate and defect fixtures."""
    sources = [c.source for p in sorted((ROOT / "problems").glob("*.py"))
               for c in generate.run(GenerateRequest(problem=load_problem(p), n=6, families=WRITTEN)).candidates]
    inductor = [c.source for stem in INDUCTOR_SOURCES for c in generate.run(GenerateRequest(
        problem=load_problem(ROOT / "problems" / f"{stem}.py"), n=3, families=["inductor"])).candidates]
    assert len(inductor) == 3 * len(INDUCTOR_SOURCES)
    sources += inductor
    files = [*ROOT.glob("prompts/examples/*.py"), *ROOT.glob("tests/fixtures/candidates/*.py"),
             *ROOT.glob("tests/fixtures/defects/*.py")]
    sources += [f.read_text() for f in files]
    sources += [json.loads(f.read_text()).get("source", "") for f in ROOT.glob("tests/fixtures/ncu/**/*.json")]
    assert len(sources) > 100 and [s[:200] for s in sources if static_checks.findings(s)] == []


@pytest.mark.slow
def test_compile_runs_the_static_checks(tmp_path: Path):
    from kernelflow.stages.contracts import CompileRequest

    result = run_stage("compile", CompileRequest(candidate=candidate("l2_persist"), problem=SOFTMAX,
                                              workdir=str(tmp_path / "c")))
    assert result.failure_kind == "cheat" and "l2_persistence" in result.message


def test_the_timer_keeps_the_clock_it_was_given(monkeypatch: pytest.MonkeyPatch):
    """Bound at import, before any candidate: a replaced time.perf_counter_ns does not reach it."""
    monkeypatch.setattr(time, "perf_counter_ns", lambda: 0)
    us, _ = Timer("cpu").time_us(lambda: time.sleep(0.002), [])
    assert us >= 2000


def test_a_tail_beyond_a_sync_is_work_left_running():
    honest = left_running([10.0] * 9, [12.0, 15.0, 11.0] * 3, [14.0] * 9)
    hidden = left_running([8.0] * 9, [900.0] * 9, [14.0] * 9)  # the events saw 8 us, the work took 900 more
    assert honest is None and hidden == 900.0
    assert left_running([5000.0] * 9, [300.0] * 9, [14.0] * 9) is None  # a tenth of a long call is noise


class FakeCudaRuntime:
    """Stands in for libcudart's three persisting-L2 calls (ctypes.byref arguments, cudaSuccess = 0)."""

    def __init__(self, limit: int):
        self.limit, self.resets = limit, 0

    def cudaDeviceGetLimit(self, value, which):  # noqa: N802 (the C name)
        value._obj.value = self.limit if which == 6 else 0
        return 0

    def cudaDeviceSetLimit(self, which, value):  # noqa: N802
        self.limit = value.value if which == 6 else self.limit
        return 0

    def cudaCtxResetPersistingL2Cache(self):  # noqa: N802
        self.resets += 1
        return 0


def test_untimed_lead_in_calls_that_skip_their_work_are_a_cheat(tmp_path: Path):
    """The lead-in before each timed call (stages/measure/timing.py SUSTAIN_US) runs on CUDA only; its check is run here on
    the CPU, through the same _Candidate, with the interpreter's launches counted."""
    from kernelflow.stages.harness.candidate import load_model_class

    x = torch.randn(4, 16)

    def warmed(name: str) -> _Candidate:
        work = tmp_path / Path(name).stem
        guard = Guard(work, candidate(name).source)  # counts the candidate's Triton launches
        cand = _Candidate(guard, load_model_class(candidate(name), work, "cpu")(), SOFTMAX.tolerance, "cpu0")
        cand.warm([x])
        return cand

    warmed(str(ROOT / "prompts" / "examples" / "triton_softmax.py")).lead_in(Timer("cpu"), [x], 8, "cpu0 timed call 0")
    with pytest.raises(CandidateFault, match="8 calls launched 0 kernels, every warm-up call launched at least 1"):
        warmed("cool_lead_in").lead_in(Timer("cpu"), [x], 8, "cpu0 timed call 0")


def test_the_lead_in_is_sized_to_the_sustained_load_and_absent_on_a_cpu():
    timer = Timer("cpu")
    assert timer.lead_calls(500.0) == 0
    timer.device = "cuda"  # the sizing rule alone (no device needed)
    assert [timer.lead_calls(us) for us in (500.0, 1500.0, 19_999.0, 50_000.0, 5.0)] == [40, 14, 2, 1, MAX_LEAD]
    # where the power cap is on: SETTLE_US (150 ms) of calls, at most MAX_SETTLE_LEAD
    assert [timer.lead_calls(us, settle=True) for us in (1000.0, 583.0, 200_000.0, 5.0)] == [150, 258, 1, MAX_SETTLE_LEAD]


class FakeNvml:
    """pynvml's few calls the timer makes; `reasons` is the clock-event bit mask it reports (0x4: software power cap)."""
    NVML_CLOCK_SM = 1

    def __init__(self, mhz: int, reasons: int | Exception):
        self.mhz, self.reasons = mhz, reasons

    def nvmlInit(self) -> None: ...

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"gpu{index}"

    def nvmlDeviceGetClockInfo(self, handle: str, which: int) -> int:
        return self.mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: str) -> int:
        if isinstance(self.reasons, Exception):
            raise self.reasons
        return self.reasons


def test_the_clock_after_each_timed_call_is_read_and_summarized(monkeypatch: pytest.MonkeyPatch):
    from kernelflow.stages.measure.timing import clock_summary, nvml_clock

    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    read = nvml_clock(FakeNvml(1515, 0x4 | 0x1))
    assert read is not None and read() == (1515, True)
    assert nvml_clock(FakeNvml(1980, 0x1))() == (1980, False)  # type: ignore[misc]
    assert nvml_clock(FakeNvml(1980, RuntimeError("NVML_ERROR_NOT_SUPPORTED"))) is None
    assert clock_summary([(1500, True), (1980, False), (1600, True)]) == (1600.0, 2 / 3)
    assert clock_summary([]) == (None, None) and Timer("cpu").last_clock is None


def test_persisting_l2_is_read_reset_and_a_set_aside_is_a_cheat(tmp_path: Path):
    runtime = FakeCudaRuntime(limit=32 << 20)
    assert persisting_l2_bytes(runtime) == 32 << 20
    reset_persisting_l2(runtime)
    assert (persisting_l2_bytes(runtime), runtime.resets) == (0, 1)
    import kernelflow.stages.measure.timing as timing

    saved = timing._runtime[:]  # on a GPU the real runtime may be loaded already: the fake stands in for it
    timing._runtime[:] = [FakeCudaRuntime(limit=1 << 20)]  # as if a candidate had set one aside on a GPU
    try:
        with pytest.raises(CandidateFault, match="1048576 bytes of L2 are set aside as persisting"):
            _Candidate(Guard(tmp_path, ""), lambda x: x, SOFTMAX.tolerance, "cpu0").l2("cpu0 timed call 3")
    finally:
        timing._runtime[:] = saved


def test_held_out_shapes_keep_alignment_and_settings():
    assert [perturb(v) for v in (7, 96, 600, 8192, 32, 1)] == [6, 64, 592, 4096, 64, 2]
    pairs = held_out(SOFTMAX.cpu_workloads, SOFTMAX.cpu_workloads + SOFTMAX.gpu_workloads)
    assert pairs[0][0].name == "cpu0" and [h.params for _, h in pairs] == \
        [{"batch_size": 6, "dim": 64}, {"batch_size": 6, "dim": 96}, {"batch_size": 7, "dim": 64}]  # then one each
    attention = load_problem(ROOT / "problems" / "22_attention_bf16.py")
    pairs = held_out(attention.cpu_workloads, attention.cpu_workloads + attention.gpu_workloads)
    assert all(h.params["mask_mode"] == 1 for _, h in pairs)  # a setting (never above 8 anywhere), not a size
    # a plain KernelBench file's one workload sets nothing: the module's sizes stand for it
    assert held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads) == []
    pair = held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads, {"batch_size": 64, "features": 256, "groups": 4})[0]
    assert (pair[0].name, pair[1].name) == ("gpu0", "gpu0-held-out")
    assert pair[1].params == {"batch_size": 32, "features": 128, "groups": 4}
    assert held_out(SOFTMAX.cpu_workloads, SOFTMAX.cpu_workloads, {"batch_size": 64}) == \
        held_out(SOFTMAX.cpu_workloads, SOFTMAX.cpu_workloads)  # a workload that sets its sizes keeps them



def test_a_held_out_shape_is_never_larger_than_the_largest_declared():
    """Doubled small powers of two (a 3-D problem's batch and spatial sizes) would make a one-workload problem's
    held-out shape 16x its size, past 2^31 elements where int32 offsets stop: there they are halved. With a larger
    workload declared (of any size set), doubling the smallest stays below it and is kept."""
    volume = {"batch_size": 16, "depth": 16, "height": 32, "width": 32}
    pair = held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads, volume)[0]
    assert pair[1].params == {"batch_size": 8, "depth": 8, "height": 16, "width": 16}
    small, large = Workload(name="gpu0", params={"n": 16}), Workload(name="gpu1", params={"n": 4096})
    assert [h.params for _, h in held_out([small], [small, large])] == [{"n": 32}]
    assert [h.params for _, h in held_out([small], [small])] == [{"n": 8}]
    one = Workload(name="cpu0", params={"batch_size": 1, "seq_len": 32})  # a size of 1 is not halved to nothing
    nine = Workload(name="cpu1", params={"batch_size": 9, "seq_len": 8})
    assert [h.params for _, h in held_out([one, nine], [one, nine])] == \
        [{"batch_size": 1, "seq_len": 16}, {"batch_size": 2, "seq_len": 32}, {"batch_size": 1, "seq_len": 64}]

def test_held_out_shapes_move_the_input_sizes_first():
    """The architecture's sizes (get_init_inputs reads them: the parameters' shapes) stay in the first held-out shape,
    which moves every input size, and in the next ones, which move one input size each; the last moves every size.
    With no input size to move there is only the last."""
    sizes = {"batch_size": 64, "features": 256}
    pairs = held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads, sizes, {"features"})
    assert [(h.name, h.params) for _, h in pairs] == [("gpu0-held-out", {"batch_size": 32, "features": 256}),
                                                      ("gpu0-held-out-2", {"batch_size": 32, "features": 128})]
    assert held_out_of(import_problem(PLAIN.path), PLAIN.gpu_workloads, PLAIN.gpu_workloads) == pairs
    pairs = held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads, {**sizes, "height": 24}, {"features"})
    assert [h.params for _, h in pairs] == [{"batch_size": 32, "features": 256, "height": 16},
                                            {"batch_size": 32, "features": 256, "height": 24},
                                            {"batch_size": 64, "features": 256, "height": 16},
                                            {"batch_size": 32, "features": 128, "height": 16}]
    pairs = held_out(PLAIN.gpu_workloads, PLAIN.gpu_workloads, {"features": 256}, {"features"})
    assert [(h.name, h.params) for _, h in pairs] == [("gpu0-held-out", {"features": 128})]
    layernorm = load_problem(ROOT / "problems" / "03_layernorm.py")  # a WORKLOADS table: Model(dim)
    pairs = held_out_of(import_problem(layernorm.path), layernorm.cpu_workloads,
                        layernorm.cpu_workloads + layernorm.gpu_workloads)
    assert [h.params for _, h in pairs] == [{"batch_size": 6, "dim": 96}, {"batch_size": 6, "dim": 64}]


def test_writes_are_allowed_only_in_the_work_dir_and_the_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    watch = Watch(tmp_path / "work")
    assert watch.may_write(str(tmp_path / "work" / "scratch.bin"))
    assert not watch.may_write(str(tmp_path / "work" / "verify.result.json"))  # the stage's own result
    assert not watch.may_write(str(tmp_path / "work" / "verify.log"))
    # but a log below it is the candidate's: Triton's ptxas log in the stage's temp dir (stages/executors/sandbox.py puts it
    # in the work dir; on the H200 every Triton candidate in a subprocess stage was called a cheat for it)
    assert watch.may_write(str(tmp_path / "work" / "verify.tmp" / "tmp2h4s4x5j.log"))
    assert not watch.may_write(str(tmp_path / "elsewhere.txt"))
    assert not watch.may_write(str(Path.home() / ".bashrc"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # the sandbox sets it (stages/executors/sandbox.py)
    assert Watch(tmp_path / "work").may_write(str(tmp_path / "inductor" / "fxgraph" / "entry"))


def test_an_unnamed_temp_file_is_allowed_a_named_one_outside_the_work_dir_is_not(tmp_path: Path):
    """tempfile.TemporaryFile opens the temp dir itself with O_TMPFILE (torch.compile's max-autotune does, on the
    H200 this was refused as 'write /tmp' until it was told apart from a write to a named file there)."""
    watch = Watch(tmp_path / "work")
    with watch.active():
        with tempfile.TemporaryFile() as f:
            f.write(b"scratch")
        with pytest.raises(PermissionError), open(os.path.join(tempfile.gettempdir(), "kf-not-allowed.txt"), "w"):
            pass
    assert watch.attempts == [f"write {os.path.realpath(tempfile.gettempdir())}/kf-not-allowed.txt (outside its "
                              "work dir, or a file of the harness)"]


def test_a_path_relative_to_a_directory_descriptor_is_judged_where_it_lies(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch):
    """shutil.rmtree removes entries by name relative to the directory's descriptor (Triton cleans its launcher
    build dir in the temp dir that way: allowed); a relative name is not taken from the working directory (a
    candidate's unlink('x', dir_fd=outside) from inside its work dir was allowed that way)."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    work.mkdir(), outside.mkdir()
    (outside / "victim").write_text("keep")
    (work / "victim").write_text("mine")
    monkeypatch.chdir(work)
    scratch = Path(tempfile.mkdtemp())
    (scratch / "launcher.c").write_text("int x;")
    watch, fd = Watch(work), os.open(outside, os.O_RDONLY)
    try:
        with watch.active():
            shutil.rmtree(scratch)
            with pytest.raises(PermissionError):
                os.unlink("victim", dir_fd=fd)
    finally:
        os.close(fd)
    assert not scratch.exists() and (outside / "victim").read_text() == "keep"
    assert watch.attempts == [f"remove {outside.resolve()}/victim (outside its work dir, or a file of the harness)"]


def test_torch_patching_itself_is_not_blamed_on_the_candidate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """torch.compile inside a section (dynamo wraps manual_seed and Module.__init__ on first use)."""
    monkeypatch.chdir(tmp_path)  # inductor writes probe files in the working directory, as in a stage process
    guard = Guard(tmp_path, "")
    model = torch.compile(torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()), backend="eager")
    with guard.section("a forward under torch.compile"):
        model(torch.randn(4, 8))


def test_the_harness_own_threads_are_left_alone(tmp_path: Path):
    """A thread that was running before the section (a Prefect client, a log writer) may write where it likes."""
    guard, go = Guard(tmp_path / "work", ""), threading.Event()
    writer = threading.Thread(target=lambda: go.wait() and (tmp_path / "harness.log").write_text("row"))
    writer.start()
    with guard.section("a call"):
        go.set()
        writer.join()
    assert (tmp_path / "harness.log").read_text() == "row"


def test_a_thread_the_harness_starts_during_a_section_is_not_the_candidates(tmp_path: Path):
    """torch.compile's pool reader (a harness thread, started before the section) starts its quiesce timer thread
    when a late compile result arrives, at any moment, a timed call included (seen on the H200: a benchmark failed as
    a cheat with "left 1 thread(s) running (subproc_worker_timer)"). That thread sleeps in library code; it is not
    work the candidate hid. The same thread started by the candidate's code is still a cheat, and so is one that a
    harness thread starts while running a callback of the candidate's."""
    from torch._inductor.compile_worker.timer import Timer as QuiesceTimer

    guard = Guard(tmp_path / "work", "")
    quiesce = QuiesceTimer(600, lambda: None)  # its thread sleeps 300 s at a time: alive through the test
    late_result = threading.Timer(0.2, quiesce.record_call)  # library code only on the starting thread's stack
    late_result.start()
    with guard.section("a timed call", timed=True):
        late_result.join(5)
    assert quiesce.background_thread is not None and quiesce.background_thread.is_alive()
    with guard.section("the next call"):
        pass

    stop = threading.Event()

    def spin() -> None:
        while not stop.wait(0.01):
            pass

    with pytest.raises(CandidateFault, match=r"left 1 thread\(s\) running \(mine\)"), \
            guard.section("a call that starts such a thread itself"):
        threading.Thread(target=spin, name="mine", daemon=True).start()
    handed = threading.Timer(0.2, lambda: threading.Thread(target=spin, name="via-harness", daemon=True).start())
    handed.start()  # a harness thread that will run the candidate's callback
    with pytest.raises(CandidateFault, match=r"running \(via-harness\)"), guard.section("a call"):
        handed.join(5)
        time.sleep(0.05)
    stop.set()
