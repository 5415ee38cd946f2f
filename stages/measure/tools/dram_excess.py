"""DRAM traffic far above the minimum the workload must move (re-reads, unfused passes, spilled intermediates).

Trigger: measured DRAM bytes of the call (dram__bytes_read + dram__bytes_write per launch x invocations, over the
profiled kernels; ncu flushes caches before each kernel) at least EXCESS_RATIO x work.bytes_min (every input read
once, every output written once). Kernels missing the metrics add nothing, so the ratio is a lower bound.
Severity: 1 - 1 / ratio, at most MAX_SEVERITY: on a memory-bound call, time scales with bytes moved.
"""

from __future__ import annotations

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity

NAME = "dram_excess"
CLASSES = frozenset({"memory"})
EXCESS_RATIO = 1.5  # measured / minimum bytes at least this: excess traffic
MAX_SEVERITY = 0.9


def check(ev: Evidence) -> list[Finding]:
    if ev.work is None or ev.work.bytes_min <= 0:
        return []
    per_kernel = {k.kernel: ((metric(k, "dram__bytes_read.sum") or 0) + (metric(k, "dram__bytes_write.sum") or 0))
                  * k.invocations for k in kernels(ev)}
    measured = sum(per_kernel.values())
    ratio = measured / ev.work.bytes_min
    if ratio < EXCESS_RATIO:
        return []
    top = max(per_kernel, key=lambda n: per_kernel[n])
    return [Finding(
        tool=NAME, severity=severity(min(MAX_SEVERITY, 1 - 1 / ratio)),
        diagnosis=f"the call moves {measured / 1e6:.1f} MB through DRAM, {ratio:.1f}x the "
                  f"{ev.work.bytes_min / 1e6:.1f} MB "
                  f"minimum (most in {top}): data is read more than once or intermediates round-trip through memory",
        recommendation="Read each input byte once: fuse passes (e.g. a max pass and a sum pass into one online pass), "
                       "keep a row or tile resident in registers/shared memory while it is reused, order blocks so "
                       "neighbours share tiles in L2, and never write intermediates that the next step reads back.",
        action=Action(kind="reduce_dram_traffic", params={"excess_ratio": round(ratio, 2)}),
        evidence={"dram_bytes": measured, "bytes_min": ev.work.bytes_min, "ratio": ratio, "top_kernel": top})]
