"""Too few blocks for the SMs, or a mostly empty last wave.

Trigger: a grid of fewer blocks than SMs (launch__grid_size < device__attribute_multiprocessor_count), or fewer
than FEW_WAVES waves (launch__waves_per_multiprocessor) whose last wave is at most TAIL_FRACTION full.
Severity, assuming blocks of equal length: idle SMs' share (1 - grid / SMs), or the last wave's idle share
(1 - waves / ceil(waves)), x the kernel's share.
"""

from __future__ import annotations

import math

from kernelflow.stages.contracts import Action, Finding
from kernelflow.stages.measure.tools import Evidence, kernels, metric, severity, share

NAME = "tail_wave"
CLASSES = frozenset({"compute", "memory", "latency"})
EXPLAINS = frozenset({"long_scoreboard"})  # too few blocks leave loads uncovered
FEW_WAVES = 4.0  # with this many waves or more, a partial last wave costs little
TAIL_FRACTION = 0.5  # last wave at most this full: a tail


def check(ev: Evidence) -> list[Finding]:
    out = []
    for k in kernels(ev):
        grid, sms = metric(k, "launch__grid_size"), metric(k, "device__attribute_multiprocessor_count")
        waves = metric(k, "launch__waves_per_multiprocessor")
        if grid is not None and sms and grid < sms:
            idle, what = 1 - grid / sms, f"a grid of {grid:g} blocks leaves {sms - grid:g} of {sms:g} SMs idle"
            params = {"min_blocks": int(sms)}
        elif waves is not None and waves < FEW_WAVES and 0 < waves % 1 <= TAIL_FRACTION and waves > 1:
            idle = 1 - waves / math.ceil(waves)
            what = f"{waves:.2f} waves of blocks: the last wave fills only {waves % 1:.0%} of the SMs"
            params = {"target_waves": math.floor(waves) or 1}
        else:
            continue
        out.append(Finding(
            tool=NAME, kernel=k.kernel, severity=severity(idle * share(ev, k)),
            diagnosis=f"{what}, so about {idle:.0%} of the kernel's SM time is idle",
            recommendation="Give every SM work for the whole kernel: split the work finer (smaller tiles, split-K or "
                           "split rows with a second reduction pass), or size the grid to a whole number of waves; a "
                           "persistent kernel looping over tiles also removes the tail.",
            action=Action(kind="more_parallelism", params=params),
            evidence={"grid_size": grid, "sm_count": sms, "waves_per_sm": waves, "idle_share": idle}))
    return out
