"""Compare a candidate's output with the reference: structure, finiteness, all-zero, tolerance."""

from __future__ import annotations

from typing import Any

import torch

from kernelflow.stages.contracts import Tolerance
from kernelflow.stages.errors import CandidateFault


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


def judge(out: Any, ref64: Any, ref_native: Any, tol: Tolerance, what: str) -> float:
    """Raise CandidateFault unless out matches; returns the worst error ratio over outputs."""
    worst = 0.0
    for i, (o, r) in enumerate(zip(check_structure(out, ref_native), as_list(ref64), strict=True)):
        r = r.to(o.device)
        if o.is_floating_point():
            bad = ~torch.isfinite(o) & torch.isfinite(r)
            if bad.any():
                raise CandidateFault("nan", f"{what}: output {i} has {int(bad.sum())} of {o.numel()} elements "
                                     "NaN/Inf (computed, or never written: outputs are NaN-poisoned)")
            if o.numel() and not o.ne(0).any() and r.ne(0).any():
                raise CandidateFault("all_zero", f"{what}: output {i} is all zeros, the reference is not")
        ratio = error_ratio(o, r, tol)
        if ratio > 1.0:
            diff = (o.double() - r.double()).abs()
            idx = int(diff.flatten().argmax()) if diff.numel() else 0
            raise CandidateFault("mismatch", f"{what}: output {i} off by {ratio:.3g}x the tolerance "
                                 f"(max abs error {float(diff.max()):.3g} at flat index {idx}; rtol={tol.rtol}, "
                                 f"atol={tol.atol}*rms(ref))")
        worst = max(worst, ratio)
    return worst
