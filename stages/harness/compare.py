"""Compare a candidate's output with the reference: structure, finiteness, all-zero, tolerance.

The tolerance is the problem's, never stricter than eager PyTorch's own error: a candidate may use the precision
eager uses for the same op (cuDNN's TF32 convolutions, an fp32 sum over a long axis). Where eager's own error ratio
on an output (against the float64 reference, same inputs) is above 1, that output's bound is EAGER_MARGIN x eager's;
where eager meets the tolerance, the bound is the tolerance itself.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelflow.stages.contracts import Tolerance
from kernelflow.stages.errors import CandidateFault

# A candidate's error may reach twice eager's: a sum ordered differently in the same precision (another blocking,
# another reduction tree) carries rounding error of the same size as eager's, in another direction, so it can be
# off the float64 reference by about as much again as eager is.
EAGER_MARGIN = 2.0


def as_list(out: Any) -> list[Any]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_structure(out: Any, ref: Any) -> list[torch.Tensor]:
    """Plain tensors of the reference's shape, dtype and device; subclasses (lazy outputs) are cheats."""
    outs, refs = as_list(out), as_list(ref)
    if len(outs) != len(refs):
        raise CandidateFault("mismatch", f"returns {len(outs)} outputs, the reference {len(refs)}")
    for i, (o, r) in enumerate(zip(outs, refs, strict=True)):
        if not isinstance(o, torch.Tensor):
            raise CandidateFault("mismatch", f"output {i} is {type(o).__name__}, not a tensor")
        if type(o) is not torch.Tensor:
            raise CandidateFault("cheat", f"output {i} is a {type(o).__name__} (tensor subclass), not a plain tensor")
        if o.shape != r.shape:
            raise CandidateFault("mismatch", f"output {i} has shape {tuple(o.shape)}, expected {tuple(r.shape)}")
        if o.dtype != r.dtype:
            raise CandidateFault("mismatch", f"output {i} has dtype {o.dtype}, expected {r.dtype}")
        if o.device != r.device:
            raise CandidateFault("mismatch", f"output {i} is on {o.device}, expected {r.device}")
    return outs


def error_ratio(out: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> float:
    """max |out - ref| / (atol * rms(ref) + rtol * |ref|); <= 1 passes. Integer outputs must match exactly."""
    if not ref.is_floating_point():
        return 0.0 if torch.equal(out, ref) else float("inf")
    o, r = out.double(), ref.double()
    rms = r.pow(2).mean().sqrt()
    bound = (tol.atol * rms + tol.rtol * r.abs()).clamp_min(torch.finfo(torch.float64).tiny)
    return float(((o - r).abs() / bound).max()) if o.numel() else 0.0


def eager_ratio(eager: torch.Tensor, ref: torch.Tensor, tol: Tolerance) -> float:
    """Eager PyTorch's own error ratio against the float64 reference, over the elements it computes finite (an
    overflow widens nothing: a candidate's output must be finite wherever the reference is); 0 for an integer
    output, which must match exactly whatever eager returns."""
    if not eager.is_floating_point() or not ref.is_floating_point():
        return 0.0
    ref = ref.to(eager.device).double()
    return error_ratio(torch.where(torch.isfinite(eager), eager.double(), ref), ref, tol)


def limit(eager: float) -> float:
    """The error ratio a candidate may reach where eager's own is `eager`: the tolerance (1) where eager meets it,
    EAGER_MARGIN x eager's where eager does not."""
    return EAGER_MARGIN * eager if eager > 1.0 else 1.0


def widened(eager: float) -> str:
    """What a reader must know of a bound widened to eager's error ('' where eager meets the tolerance)."""
    return (f"tolerance widened to eager's own error x{EAGER_MARGIN:g}: eager is {eager:.3g}x off the problem's "
            "tolerance") if limit(eager) > 1.0 else ""


def judge(out: Any, ref64: Any, ref_native: Any, tol: Tolerance, what: str) -> float:
    """Raise CandidateFault unless out matches; returns the worst error ratio over outputs. `ref_native` is eager's
    output on the same inputs: each output's bound comes from its error (`limit`)."""
    worst = 0.0
    for i, (o, r, e) in enumerate(zip(check_structure(out, ref_native), as_list(ref64), as_list(ref_native),
                                      strict=True)):
        r = r.to(o.device)
        if o.is_floating_point():
            bad = ~torch.isfinite(o) & torch.isfinite(r)
            if bad.any():
                raise CandidateFault("nan", f"{what}: output {i} has {int(bad.sum())} of {o.numel()} elements "
                                     "NaN/Inf (computed, or never written: outputs are NaN-poisoned)")
            if o.numel() and not o.ne(0).any() and r.ne(0).any():
                raise CandidateFault("all_zero", f"{what}: output {i} is all zeros, the reference is not")
        ratio, eager = error_ratio(o, r, tol), eager_ratio(e, r, tol)
        if ratio > limit(eager):
            diff = (o.double() - r.double()).abs()
            idx = int(diff.flatten().argmax()) if diff.numel() else 0
            wider = f"; {widened(eager)}, so the bound is {limit(eager):.3g}x" if widened(eager) else ""
            raise CandidateFault("mismatch", f"{what}: output {i} off by {ratio:.3g}x the tolerance "
                                 f"(max abs error {float(diff.max()):.3g} at flat index {idx}; rtol={tol.rtol}, "
                                 f"atol={tol.atol}*rms(ref){wider})")
        worst = max(worst, ratio)
    return worst
