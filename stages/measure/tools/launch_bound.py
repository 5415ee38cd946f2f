"""Launch-bound: many kernels per call, each short next to the launch overhead.

Trigger: at least MANY_LAUNCHES launches per call and launch overheads at least OVERHEAD_SHARE of the call's
time. The overhead is measured when the profile has kernel durations (call time minus GPU time of all launches),
else estimated as launches x the GPU's launch overhead (peaks.launch_overhead_us).
Severity: overhead share x (1 - 1 / launches): fusing into one kernel keeps one launch's overhead.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernel_time_us, kernels, severity

NAME = "launch_bound"
CLASSES = frozenset({"latency"})
MANY_LAUNCHES = 2  # fewer launches leave nothing to fuse
OVERHEAD_SHARE = 0.25  # launch overheads at least this share of the call: launch-bound


def check(ev: Evidence) -> list[Finding]:
    launches = ev.launches_per_call or sum(k.invocations for k in kernels(ev))
    gpu_us = sum(t for k in kernels(ev) if (t := kernel_time_us(k)) is not None)
    if launches < MANY_LAUNCHES or not ev.time_us:
        return []
    if gpu_us > 0:
        overhead_us, how = max(0.0, ev.time_us - gpu_us), f"kernels run {gpu_us:.1f} us of it"
    elif ev.peaks is not None:
        overhead_us, how = launches * ev.peaks.launch_overhead_us, f"~{ev.peaks.launch_overhead_us:g} us per launch"
    else:
        return []
    part = min(1.0, overhead_us / ev.time_us)
    if part < OVERHEAD_SHARE:
        return []
    return [Finding(
        tool=NAME, severity=severity(part * (1 - 1 / launches)),
        diagnosis=f"{launches} kernel launches per call take {ev.time_us:.1f} us, {how}: launch overhead and gaps "
                  f"are about {part:.0%} of the call",
        recommendation="Fuse the kernels into one (or fewer): do the producer's and consumer's work in the same "
                       "kernel, keep intermediates in registers or shared memory, and drop separate copy/cast/"
                       "reshape kernels; a CUDA graph only hides launches, fusing removes them.",
        action=Action(kind="fuse_kernels", params={"launches_per_call": launches}),
        evidence={"launches_per_call": launches, "time_us": ev.time_us, "overhead_us": overhead_us,
                  "overhead_share": part})]
