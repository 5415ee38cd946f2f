"""Benchmark on CPU: interleaved contenders, intervals, provenance, re-checked timed outputs."""

from pathlib import Path

from kernelflow.stages.contracts import BenchmarkRequest, Candidate, Origin
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.measure.timing import median_ci
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")


def bench(name: str, tmp_path: Path, **kw):
    source = (ROOT / "tests" / "fixtures" / "adversarial" / f"{name}.py").read_text()
    candidate = Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))
    request = BenchmarkRequest(workdir=str(tmp_path / "w"), problem=SOFTMAX,
                               candidate=candidate, baselines=["eager"], **{"min_reps": 10, "max_reps": 40, **kw})
    return run_stage("benchmark", request, "inline")


def test_times_candidate_and_eager_per_workload(tmp_path: Path):
    result = bench("good", tmp_path)
    assert result.status == "ok" and result.recheck_passed
    assert {(t.contender, t.workload) for t in result.timings} == {
        (c, w.name) for c in ("candidate", "eager") for w in SOFTMAX.cpu_workloads}
    for t in result.timings:
        assert t.ci_low_us <= t.median_us <= t.ci_high_us and 10 <= t.n_reps <= 40
        assert t.provenance.device == "cpu" and not t.l2_flushed and t.input_sets >= 2
    assert result.speedup_vs_eager > 0 and result.speedup_vs_compile is None


def test_host_time_per_call_is_kept_and_a_launch_bound_call_named(tmp_path: Path, monkeypatch):
    """On a GPU the timer measures the host's time per call issued back to back beside the device's; here a stand-in
    reports three times the median's scale for the candidate alone (on a CPU there is none: host_us is None)."""
    from kernelflow.stages.measure.timing import Timer

    assert all(t.host_us is None for t in bench("good", tmp_path / "cpu").timings)
    seen = []

    def back_to_back_us(self, fn, args, calls=20):
        seen.append(type(getattr(fn, "__self__", fn)).__name__)
        fn(*args)  # the candidate's call runs where its back-to-back calls would: inside a guarded section
        return 1e6 if seen[-1] == "ModelNew" else 0.0

    monkeypatch.setattr(Timer, "back_to_back_us", back_to_back_us)
    result = bench("good", tmp_path / "fake")
    hosts = {(t.contender, t.workload): t.host_us for t in result.timings}
    assert all(h == 1e6 for (c, _), h in hosts.items() if c == "candidate"), hosts
    assert all(h == 0.0 for (c, _), h in hosts.items() if c == "eager"), hosts
    assert sorted(seen) == sorted(["ModelNew", "Model"] * len(SOFTMAX.cpu_workloads)), seen
    assert "candidate is launch-bound on cpu0" in result.message and "eager is launch-bound" not in result.message


def test_outputs_of_timed_calls_are_rechecked(tmp_path: Path):
    result = bench("right_only_when_verified", tmp_path, min_reps=60, max_reps=60)  # wrong from about rep 27 on
    assert (result.status, result.failure_kind) == ("failed", "mismatch") and "timed call" in result.message


def test_every_input_set_is_rechecked(tmp_path: Path):
    """Right only on the first input set (the warm-up's): caught on the second set's first timed call."""
    result = bench("right_only_on_first_input", tmp_path)
    assert (result.status, result.failure_kind) == ("failed", "mismatch") and "timed call 1" in result.message


def test_median_ci_is_an_order_statistic_interval():
    med, lo, hi = median_ci([float(x) for x in range(1, 102)])
    assert med == 51 and 40 <= lo < 51 < hi <= 62


def test_torch_compile_baselines_are_specialized_to_each_workload(monkeypatch):
    """Each workload's torch.compile is compiled for its own shapes: the graph inductor gets for a later workload has
    no symbolic sizes (dynamo's automatic dynamic shapes would make the second one shape-generic), and three modes on
    three shapes (nine cache entries of one forward) all compile (past dynamo's default limit of 8 the ninth would run
    eagerly)."""
    import copy

    import torch
    import torch._inductor.compile_fx as compile_fx

    from kernelflow.stages.harness.instantiate import MODES, baseline

    graphs: list[list[bool]] = []

    def spy(gm: torch.fx.GraphModule, example_inputs: list, *args, **kwargs):
        graphs.append([isinstance(x, torch.SymInt) or (isinstance(x, torch.Tensor) and
                       any(isinstance(d, torch.SymInt) for d in x.shape)) for x in example_inputs])
        return gm.forward  # the graph as dynamo traced it, run without inductor's build

    class Softmax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x * 2.0, dim=-1)

    monkeypatch.setattr(compile_fx, "compile_fx", spy)
    torch._dynamo.reset()
    ref, config = Softmax(), torch._dynamo.config
    # baseline() sets these two: the patch puts them back after
    with config.patch(recompile_limit=config.recompile_limit, fail_on_recompile_limit_hit=False):
        for name in MODES:
            graphs.clear()
            for shape in [(64, 128), (32, 256), (16, 512)]:
                x = torch.randn(shape)
                torch.testing.assert_close(baseline(name, copy.deepcopy(ref))(x), ref(x))
            assert graphs == [[False], [False], [False]], (name, graphs)
    torch._dynamo.reset()


def test_a_power_capped_workload_settles_each_lead_in_and_drops_the_rounds_before(tmp_path: Path, monkeypatch):
    """On a GPU, once NVML reports the power cap, every lead-in is SETTLE_US of the contender's own calls, and the
    rounds timed before (which met their neighbours' power state) are dropped; without NVML the cap is assumed. Here a
    stand-in timer on the CPU plays the GPU: every call "takes" 1000 us, and the cap shows from the 7th timed call of
    the run on (cpu0: after its two sizing calls and two rounds, so its third round sees it and is dropped with the
    first two; cpu1: already at its sizing calls)."""
    import kernelflow.stages.measure.timing as timing
    from kernelflow.stages.measure.timing import Timer

    def run(clock: bool, cap_from: int | None) -> tuple[object, list[int]]:
        calls, leads = [0], []

        def init(self, device):
            real_init(self, "cpu")
            self.device, self._clock = "cuda", (lambda: (1980, False)) if clock else None

        def time_us(self, fn, args):
            calls[0] += 1
            out = fn(*args)
            self.last_tail_us = None
            self.last_clock = (1500, calls[0] > cap_from) if clock and cap_from is not None else \
                ((1980, False) if clock else None)
            return 1000.0, out

        def sustain(self, fn, args, n):
            leads.append(n)
            for _ in range(n):
                fn(*args)

        monkeypatch.setattr(Timer, "__init__", init)
        monkeypatch.setattr(Timer, "time_us", time_us)
        monkeypatch.setattr(Timer, "sustain", sustain)
        monkeypatch.setattr(Timer, "back_to_back_us", lambda self, fn, args, calls=20: None)
        monkeypatch.setattr(timing, "SETTLE_US", 6_000.0)  # 6 calls of 1000 us (150 on a GPU), against SUSTAIN's 20
        result = bench("good", tmp_path / f"{clock}-{cap_from}")
        monkeypatch.undo()
        return result, leads

    real_init = Timer.__init__
    capped, leads = run(clock=True, cap_from=6)
    assert capped.status == "ok", capped.message
    rows = {(t.workload, t.contender): t for t in capped.timings}
    assert {t.lead_calls for t in rows.values()} == {6} and all(10 <= t.n_reps <= 40 for t in rows.values())
    assert "power cap is on for cpu0" in capped.message and "the 3 rounds timed before the cap was seen were dropped" \
        in capped.message and "power cap is on for cpu1: each timed call followed at least 6 ms" in capped.message
    assert leads[:6] == [20] * 6 and set(leads[6:]) == {6}  # the round that saw the cap ends as it began
    assert all(t.power_capped_share == 1.0 for t in rows.values())  # only the settled rounds' clocks are kept

    cool, leads = run(clock=True, cap_from=None)
    assert cool.status == "ok" and "power cap" not in cool.message and set(leads) == {20}
    assert {t.lead_calls for t in cool.timings} == {20}

    blind, leads = run(clock=False, cap_from=None)
    assert blind.status == "ok" and set(leads) == {6} and "NVML cannot read the power cap here" in blind.message
