"""What the SM clock is while each procedure times a power-bound kernel (issue 8 part 5: 10 and 16 disagree).

On the H200 the bf16 GEMMs of 10 and 16 time 11-14% slower by KernelBench's procedure than by kernelflow's benchmark
stage, eager as much as the candidate, with the SM clock at 1500-1650 MHz after KernelBench's passes (BENCHMARKS.md
fourteenth session). The reading to test: the power limit lowers the clock under sustained load, and kernelflow's
timing leaves the device idle for longer between calls (a 300 us spin cover, the harness's work), so its calls run at
higher clocks. A sampler process reads NVML (SM clock, board power, clock-event reasons) every ~1 ms; each phase's
window gives the clock while it ran. Phases, for each contender (the best candidate of bench/results and eager) on
each GPU shape:
- `kb`: KernelBench's procedure (scripts/agreement.py kernelbench_times_ms), 100 trials;
- `timer`: kernelflow's Timer.time_us alone, 100 calls back to back (sync, flush, spin, call; no harness between);
- `lead_<L>`: the same, with the call itself queued untimed for about L ms of device time before each flush (L=0:
  once);
- `lead_<L>_nospin`: that lead-in without the spin (the lead-in covers the host's path when a call is long);
and per problem `stage`: kernelflow's benchmark stage (stages/benchmark.py), candidate and eager, all shapes;
`stage_<L>`: the same stage with its lead-in set to about L ms (stages/timing.py SUSTAIN_US, for L in STAGE_LEADS_MS),
and `sustained`: 2 s of back-to-back calls of eager on the first shape, for how fast the clock falls.
`stage_<L>` tests a reading of BENCHMARKS.md's seventeenth session (22 gpu1): the stage interleaves its contenders, and
with a 20 ms lead-in a call is timed partly at the power state its neighbour left; with a lead-in longer than the
power controller's response each contender's stage median would come back to its median alone (`lead_20`). Measured
(BENCHMARKS.md eighteenth session): on 22 it did; on 10 both GEMMs read 4-5% above their time alone (a deeper state).
Since then the stage settles a capped workload itself (stages/timing.py SETTLE_US, which SUSTAIN_US does not change),
so on a capped workload `stage` and `stage_150` time the same procedure.

`python3 scripts/probes/power_state.py --problems 10,16 --out FILE`. Needs CUDA and NVML.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

SAMPLER = r"""
import sys, time, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(int(sys.argv[1]))
reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
print("limit_mw", pynvml.nvmlDeviceGetEnforcedPowerLimit(h), flush=True)
while True:
    t = time.monotonic_ns()
    print(t, pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM), pynvml.nvmlDeviceGetPowerUsage(h), reasons(h), flush=True)
    time.sleep(0.0005)
"""
LEADS_MS = (0.0, 5.0, 20.0)  # lead-in device time before each timed call: 0 = one call
STAGE_LEADS_MS = (150.0,)  # the stage's lead-in past the ~100-150 ms the clock takes to fall (module doc)


def timer_times_us(timer: Any, fn: Any, args: list[Any], calls: int, lead: int, spin: bool) -> list[float]:
    """kernelflow's Timer.time_us, `calls` times; with `lead` > 0, the call itself is queued `lead` times untimed
    before each timed call's flush (no sync between: the device runs them back to back)."""
    cycles = timer.cover_cycles
    if not spin:
        timer.cover_cycles = 0
    out = []
    try:
        for _ in range(calls):
            if lead:
                for _ in range(lead):
                    fn(*args)
                us = _lead_then_time(timer, fn, args)
            else:
                us, _ = timer.time_us(fn, args)
            out.append(us)
    finally:
        timer.cover_cycles = cycles
    return out


def _lead_then_time(timer: Any, fn: Any, args: list[Any]) -> float:
    """The timer's call without its leading device sync (the lead-in's work is still queued): flush, spin, events."""
    import torch

    from stages import timing

    timer.flush_buffer.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    if timer.cover_cycles:
        timing._sleep(timer.cover_cycles)
    start.record()
    fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3


def window(samples: list[tuple[int, int, int, int]], t0: int, t1: int) -> dict[str, Any]:
    """SM clock, power and the power-cap share over one phase's window."""
    from stages.timing import SW_POWER_CAP

    inside = [s for s in samples if t0 <= s[0] <= t1]
    if not inside:
        return {"n": 0}
    return {"n": len(inside), "sm_mhz_median": statistics.median(s[1] for s in inside),
            "sm_mhz_min": min(s[1] for s in inside), "power_w_median": statistics.median(s[2] for s in inside) / 1e3,
            "power_cap_share": sum(1 for s in inside if s[3] & SW_POWER_CAP) / len(inside)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", default="10,16")
    parser.add_argument("--results", default=str(ROOT / "bench" / "results"))
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    import torch
    from agreement import kernelbench_times_ms, selected
    from bench_gpu import rebuild

    from stages import benchmark, timing
    from stages.candidate import load_model_class
    from stages.contracts import BenchmarkRequest
    from stages.inputs import draw, trial_seed
    from stages.instantiate import build, set_precision
    from stages.problem import import_problem, load_problem

    assert torch.cuda.is_available(), "needs CUDA"
    log = Path(tempfile.mkdtemp()) / "nvml.txt"
    phases: list[dict[str, Any]] = []

    def phase(name: str, tags: dict[str, Any], fn: Any, *fargs: Any) -> Any:
        t0 = time.monotonic_ns()
        result = fn(*fargs)
        phases.append({"phase": name, **tags, "t0": t0, "t1": time.monotonic_ns(),
                       **({"median_us": statistics.median(result)} if isinstance(result, list) else {})})
        print({k: v for k, v in phases[-1].items() if k not in ("t0", "t1")}, flush=True)
        return result

    def kb_us(fn: Any, inputs: list[Any]) -> list[float]:
        return [1e3 * t for t in kernelbench_times_ms(fn, inputs, "cuda")]

    def sustained(fn: Any, inputs: list[Any]) -> None:
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 2.0:
            fn(*inputs)
            torch.cuda.synchronize()

    timer = timing.Timer("cuda")
    with log.open("w") as sink:
        sampler = subprocess.Popen([sys.executable, "-c", SAMPLER, str(torch.cuda.current_device())], stdout=sink)
        time.sleep(1.0)
        try:
            for path in selected(Path(args.results), args.problems):
                problem = load_problem(ROOT / "problems" / f"{path.stem}.py")
                cand = rebuild(problem, json.loads(path.read_text()))
                assert cand is not None, f"{path.stem}: no best candidate"
                with tempfile.TemporaryDirectory() as work:
                    req = BenchmarkRequest(problem=problem, candidate=cand, device="cuda", blob_dir=work, sizes="gpu",
                                           baselines=["eager"], workdir=work)
                    for lead_ms in (None, *STAGE_LEADS_MS):  # None: the stage as it is
                        sustain = timing.SUSTAIN_US
                        timing.SUSTAIN_US = sustain if lead_ms is None else lead_ms * 1e3
                        try:
                            res = phase("stage" if lead_ms is None else f"stage_{lead_ms:g}", {"problem": path.stem},
                                        benchmark.run, req)
                        finally:
                            timing.SUSTAIN_US = sustain
                        phases[-1].update(status=res.status, medians_us={f"{t.workload}/{t.contender}": t.median_us
                                                                         for t in res.timings})
                    new_cls = load_model_class(cand, work, "cuda")
                    set_precision(problem.policy)
                    module = import_problem(problem.path)
                    for i, w in enumerate(problem.workloads("gpu")):
                        ref, new = build(module, new_cls, w, "cuda", seed=trial_seed(0, w.name, "init"))
                        inputs = draw(module, w, trial_seed(0, w.name, "bench", 0), "declared", "cuda")
                        with torch.no_grad():
                            if i == 0:
                                time.sleep(0.5)
                                phase("sustained", {"problem": path.stem, "workload": w.name}, sustained, ref, inputs)
                            for name, fn in (("candidate", new), ("eager", ref)):
                                tags = {"problem": path.stem, "workload": w.name, "contender": name}
                                time.sleep(0.3)
                                phase("kb", tags, kb_us, fn, inputs)
                                time.sleep(0.3)
                                base = phase("timer", tags, timer_times_us, timer, fn, inputs, args.calls, 0, True)
                                for lead_ms in LEADS_MS:
                                    lead = max(1, math.ceil(lead_ms * 1e3 / statistics.median(base)))
                                    for spin in (True, False):
                                        time.sleep(0.3)
                                        phase(f"lead_{lead_ms:g}" + ("" if spin else "_nospin"),
                                              {**tags, "lead_calls": lead}, timer_times_us, timer, fn, inputs,
                                              args.calls, lead, spin)
                        del ref, new, inputs
                        torch.cuda.empty_cache()
        finally:
            time.sleep(0.2)
            sampler.terminate()
            sampler.wait()
    lines = log.read_text().splitlines()
    limit = int(lines[0].split()[1]) if lines and lines[0].startswith("limit_mw") else None
    samples = [tuple(int(v) for v in ln.split()) for ln in lines[1:] if len(ln.split()) == 4]
    for p in phases:
        p["nvml"] = window(samples, p["t0"], p["t1"])  # type: ignore[arg-type]
    loads = [p for p in phases if p["phase"] == "sustained"]
    curves = [[(s[0] - p["t0"]) / 1e6, s[1], s[2] / 1e3] for p in loads for s in samples
              if p["t0"] <= s[0] <= p["t1"]][::10]
    Path(args.out).write_text(json.dumps({"power_limit_w": limit and limit / 1e3, "phases": phases,
                                          "sustained_curve_ms_mhz_w": curves}, indent=1))
    print(f"wrote {args.out}: {len(phases)} phases, {len(samples)} NVML samples")


if __name__ == "__main__":
    main()
