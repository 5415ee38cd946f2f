"""Profile one candidate, or one baseline (eager or torch.compile of the reference), on one workload: counted
work and the analytic SOL floor and class; on a GPU also its time, energy per call, achieved rates and Nsight
Compute hardware counters per kernel.

Always (no GPU needed): the workload's counted work (stages/measure/roofline.py, on meta tensors), its SOL floor and its
bottleneck class (stages/measure/bottleneck.py: from the hardware counters when read, `bound_source="counters"`, else from
the analytic terms, "analytic"; refine decides the same way, so the profiles and feedback tables agree). Peaks come from `peaks_for(<this GPU's name>)`, measured on this machine on the first profile
(stages/measure/ceilings.py) and cached; on a machine without a GPU the numbers are given for
TARGET_GPU (the H200 we optimize for) and the message says so; on an unknown GPU no floor and no class are given.

On CUDA, in this process:
- time: median over TIMED_CALLS calls, each timed alone by kernelflow.stages.measure.timing.Timer (streams synced, L2 flushed,
  CUDA events) after ~SUSTAIN_US of untimed calls, as the benchmark times them (stages/measure/timing.py: a power-limited
  kernel's clock falls within ~100 ms of sustained load, and the profile's rates are then those of the benchmark's
  median, not of a burst), after WARMUP_CALLS warm-up calls; inputs are one fresh draw of the declared distribution and
  the models are built with equal weights (kernelflow.stages.harness.instantiate.build), seeds fixed per workload. Correctness
  is not judged here (verify and benchmark do that); an exception or GPU fault in forward is a failure row. The
  candidate's import, constructor and calls run in guarded sections (stages/harness/integrity.py), here and in the
  process ncu drives: a cheat there is a `cheat` row.
- energy: J per call from NVML's total-energy counter over a loop of `energy_calls`-call blocks (stages/measure/energy.py).
- achieved FLOP/s and bytes/s = counted work / measured time; sol_fraction = floor / time.

Then the hardware counters: stages/measure/ncu.py runs Nsight Compute on a driver that rebuilds the same model, weights
and inputs (`instance`) and profiles one call after WARMUP_CALLS warm-up calls, with what is left of the stage's
deadline less NCU_MARGIN_S. A metric ncu rejects is dropped and the run repeated; any other ncu failure keeps
status "ok" with counters="unavailable" and counters_reason saying exactly why; the analytic numbers and the
timing stay.

Checked on CPU (tests/stages/test_profile.py, tests/stages/measure/test_ncu.py): the CPU path (analytic floor and class for 01_softmax
on the H200's peaks = memory, counters unavailable with the reason, no time and no energy, candidate faults as
failure rows, baselines), the raw-CSV parser on a real H200 report's CSV and on a hand-written multi-kernel
sample, the rejected-metric parser, and ncu missing from PATH. The GPU path, and ncu's acceptance of every metric
in stages/measure/ncu.METRICS, have no CPU test: their runs on a GPU are in docs/LOG.md.
"""

from __future__ import annotations

import contextlib
import time
from statistics import median

import torch

from kernelflow.stages.contracts import FailureKind, ProfileRequest, ProfileResult, Workload
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness.candidate import GPU_ONLY
from kernelflow.stages.harness.instantiate import fault_of, guarded, set_precision
from kernelflow.stages.measure import ceilings, roofline
from kernelflow.stages.measure.bottleneck import bound_of
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.energy import j_per_call
from kernelflow.stages.measure.ncu import collect_counters
from kernelflow.stages.measure.peaks import TARGET_GPU
from kernelflow.stages.measure.subject import WARMUP_CALLS, guard_for, instance, pick_workload
from kernelflow.stages.measure.timing import Timer

Result = ProfileResult

TIMED_CALLS = 50
NCU_MARGIN_S = 15.0  # ncu must finish this long before the stage's deadline (the result still has to be written)


def failed(req: ProfileRequest, kind: FailureKind, message: str, files: dict[str, str] | None = None) -> ProfileResult:
    return ProfileResult(candidate_id=req.subject_id, contender=req.contender, problem_id=req.problem.id,
                         status="failed", failure_kind=kind,
                         message=message, files=files or {}, device=req.device,
                         workload=req.workload or (req.problem.gpu_workloads[0].name if req.problem.gpu_workloads
                                                   else ""),
                         counters="unavailable", counters_reason="the candidate failed: nothing was profiled")


def _measure(req: ProfileRequest, w: Workload) -> tuple[float, float | None, str]:
    """(median us per call, J per call or None, note) on CUDA; the candidate's code in guarded sections; candidate
    faults raise CandidateFault."""
    guard = guard_for(req)
    new, inputs = instance(req, w, "cuda", guard)
    timer = Timer("cuda")
    times = []
    with guard.section(f"{w.name} profiled calls", timed=True) if guard else contextlib.nullcontext(), \
            torch.no_grad():
        for _ in range(WARMUP_CALLS):
            guarded(new, *inputs)
        try:
            sized, out = timer.time_us(new, inputs)  # sizes the first lead-in, as the benchmark's sizing call (not kept)
            del out
            lead = timer.lead_calls(sized)
            for _ in range(TIMED_CALLS):
                timer.sustain(new, inputs, lead)
                us, out = timer.time_us(new, inputs)
                times.append(us)
                del out
                lead = timer.lead_calls(median(times))
            energy, note = j_per_call(new, inputs, req.energy_calls)
        except Exception as e:
            raise fault_of(e) from e
    return median(times), energy, f"time: median of {TIMED_CALLS} calls, L2 flushed; {note}"


def _smoke_cpu(req: ProfileRequest, notes: list[str]) -> None:
    """On CPU: one call on the first CPU workload, so a candidate that cannot run fails here as elsewhere."""
    if req.candidate is None:
        notes.append(f"baseline {req.contender} not run on CPU: nothing to check without a GPU")
        return
    if not req.problem.cpu_workloads or req.candidate.backend in GPU_ONLY:
        notes.append("candidate not run on CPU (" + ("CUDA C++ needs a GPU" if req.problem.cpu_workloads
                                                     else "the problem declares no CPU workload") + ")")
        return
    w = req.problem.cpu_workloads[0]
    guard = guard_for(req)
    try:
        new, inputs = instance(req, w, "cpu", guard)
    except CandidateFault as fault:
        if fault.kind != "unavailable":
            raise
        notes.append(f"candidate not run on CPU: {fault.message}")
        return
    with guard.section(f"{w.name} call") if guard else contextlib.nullcontext(), torch.no_grad():
        guarded(new, *inputs)
    notes.append(f"candidate ran once on CPU workload {w.name} (not timed)")


def run(req: ProfileRequest) -> ProfileResult:
    started, notes = time.perf_counter(), list[str]()
    set_precision(req.problem.policy)
    w = pick_workload(req.problem, req.workload)
    cuda = req.device == "cuda" and torch.cuda.is_available()
    gpu = torch.cuda.get_device_name() if cuda else TARGET_GPU
    if cuda:  # measured once per GPU model and driver, then cached; a failure is said, the table stays in use
        try:
            notes.append(f"ceilings: {ceilings.for_this_gpu().source}"[:600])
        except Exception as e:
            notes.append(f"ceilings not measured ({type(e).__name__}: {e})"[:600])
    peaks = peaks_for(gpu)
    work = roofline.count_work(req.problem, w)
    floor = roofline.sol_floor_us(work, peaks) if peaks else None
    if not cuda:
        notes.append(f"no GPU here: floor and class are for {TARGET_GPU}; no time, energy or counters")
    elif peaks is None:
        notes.append(f"no peaks known for {gpu!r}: no SOL floor, fraction or class")
    result = ProfileResult(candidate_id=req.subject_id, contender=req.contender, problem_id=req.problem.id, status="ok",
                           device="cuda" if cuda else "cpu", workload=w.name, counters="unavailable",
                           flops=work.flops, bytes_min=float(work.bytes_min), sol_floor_us=floor)
    try:
        if cuda:
            time_us, energy, note = _measure(req, w)
            notes.append(note)
            torch.cuda.empty_cache()  # the driver under ncu allocates its own copy of the workload
        else:
            _smoke_cpu(req, notes)
    except CandidateFault as fault:
        out = failed(req, fault.kind, fault.message)  # type: ignore[arg-type]
        out.duration_s = time.perf_counter() - started
        return out
    if cuda:
        result.time_us, result.energy_j_per_call = time_us, energy
        result.achieved_flops_per_s = work.flops / (time_us * 1e-6)
        result.achieved_bytes_per_s = work.bytes_min / (time_us * 1e-6)
        result.sol_fraction = roofline.sol_fraction(time_us, floor) if floor else None
        counters = collect_counters(req, req.timeout_s - (time.perf_counter() - started) - NCU_MARGIN_S)
        result.ncu_version, result.kernels = counters.version, counters.kernels
        result.files.update(counters.files)
        notes += counters.notes
        result.counters = "unavailable" if counters.reason else "ncu"
        result.counters_reason = counters.reason
    else:
        result.counters_reason = (f"no GPU: device {req.device!r} was requested but CUDA is not available here"
                                  if req.device == "cuda" else "no GPU: profiled with device 'cpu'")
    result.bound, result.bound_source = bound_of(result, work, peaks, result.time_us)
    result.message = "; ".join(notes)
    result.duration_s = time.perf_counter() - started
    return result


if __name__ == "__main__":
    from kernelflow.stages.entry import stage_main

    stage_main(ProfileRequest, run)
