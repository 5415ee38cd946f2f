"""Template families of the builtin proposer, found by name. Each module has
`match(problem, traced) -> Plan` (traced: the reference, traced once per proposal by lowering.trace; raises
TemplateMismatch with the reason), `variants(plan) -> list[dict]`
(parameter sets, best guess first) and `render(plan, params) -> str` (the candidate module's source; a
TemplateMismatch there skips that variant). A family with `TARGETED = True` generates for a device: its match is
`match(problem, traced, device)`, and it is asked even when tracing failed (traced None)."""

from __future__ import annotations

from types import ModuleType

from kernelflow.stages.templates import (
    attention,
    conv,
    elementwise,
    inductor,
    library_epilogue,
    loss,
    matmul,
    pooling,
    rowwise,
    scan,
)

TEMPLATES: dict[str, ModuleType] = {"elementwise": elementwise, "rowwise": rowwise,
                                    "library_epilogue": library_epilogue, "matmul": matmul,
                                    "scan": scan, "loss": loss, "attention": attention, "inductor": inductor,
                                    "pooling": pooling, "conv": conv}
