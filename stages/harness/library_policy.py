"""Library policy: which torch operators a candidate's forward may call, and the census that checks it.

Verify runs every forward call of the candidate under `Census`, a TorchDispatchMode that counts the
operators the call dispatches and runs each one unchanged. A Triton launch or a call into a load_inline
extension does not pass through the dispatcher; the allocations, views and copies around it do, and so do
the ATen calls an extension makes from C++. Operators fall into three classes:

- always allowed: allocation, views and metadata, copies (ALWAYS);
- allowed when `Policy.allow_vendor_libraries`: cuBLAS/cuDNN products and convolutions (VENDOR);
- everything else computes (pointwise math, reductions, softmax, norms, random numbers, ...) and is a
  violation unless `Policy.allow_torch_compute` (plain-PyTorch candidates).

Names are matched by the operator's namespace and overload packet ("aten._softmax"). Only the aten
namespace has allowed names: an op registered through torch.library (any other namespace) counts as
compute, since the census cannot see what runs inside it. Only the forward is counted: the constructor
runs outside the census, so a candidate may prepare its weights there with any op.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Mapping
from typing import Any, Literal

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelflow.stages.contracts import Policy

# Composites such as reshape, contiguous, matmul, linear and conv2d usually decompose before the mode sees
# them (into view/clone, mm/addmm, convolution); their names are listed for the cases where one arrives whole.
ALLOCATION = frozenset({
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "zeros", "zeros_like", "new_zeros", "ones", "ones_like", "new_ones", "full", "full_like", "new_full",
    "lift_fresh",  # torch.tensor(...) of Python numbers
})
VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute", "expand",
    "squeeze", "unsqueeze", "slice", "select", "narrow", "detach", "alias", "split", "split_with_sizes", "unbind",
    "set_",  # rebinds storage; Triton's CPU interpreter hands tensors to a kernel this way
})
COPIES = frozenset({
    "copy_", "clone", "contiguous", "_to_copy", "cat", "stack", "fill_", "zero_",
    "_local_scalar_dense",  # .item(): one value read back
})
ALWAYS = ALLOCATION | VIEWS | COPIES
VENDOR = frozenset({  # cuBLAS / cuDNN (oneDNN / MKL on CPU)
    "mm", "addmm", "bmm", "baddbmm", "mv", "dot", "matmul", "linear", "_scaled_mm",
    "convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "mkldnn_convolution",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
})

OpClass = Literal["always", "vendor", "compute"]


def op_name(func: Any) -> str:
    """'aten._softmax' for aten._softmax.default: namespace and overload packet."""
    packet = getattr(func, "overloadpacket", None)
    name = packet.__name__ if packet is not None else getattr(func, "__name__", str(func))
    return f"{getattr(func, 'namespace', '?')}.{name}"


def op_class(name: str) -> OpClass:
    namespace, _, packet = name.partition(".")
    if namespace != "aten":
        return "compute"
    return "always" if packet in ALWAYS else "vendor" if packet in VENDOR else "compute"


class Census(TorchDispatchMode):
    """Counts, by `op_name`, the operators dispatched on this thread while it is active; and, by (from, to) dtype,
    the conversions between floating dtypes (`casts`: a precision downgrade shows there)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.casts: Counter[tuple[torch.dtype, torch.dtype]] = Counter()

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # __torch_dispatch__ keeps dynamo out itself, without torch's wrapper (which imports dynamo)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """`count`, kept out of dynamo's tracing once dynamo is loaded, as torch's wrapper does for every mode. Not
        before: that wrapper imports dynamo on its first call, in every stage process (with
        torch.use_deterministic_algorithms' path to it, stages/harness/integrity.py `deterministic`, most of a
        verify's time: docs/LOG.md); a process that never loaded dynamo runs no compiled frame."""
        if "torch._dynamo" in sys.modules:
            return _outside_dynamo(self, func, args, kwargs)
        return self.count(func, args, kwargs)

    def count(self, func: Any, args: Any, kwargs: Any) -> Any:
        name = op_name(func)
        self.counts[name] += 1
        out = func(*args, **(kwargs or {}))
        if name in ("aten._to_copy", "aten.copy_") and len(args) >= (1 if name == "aten._to_copy" else 2):
            src, dst = (args[0], out) if name == "aten._to_copy" else (args[1], args[0])
            if isinstance(src, torch.Tensor) and isinstance(dst, torch.Tensor) and src.dtype != dst.dtype and \
                    src.is_floating_point() and dst.is_floating_point():
                self.casts[(src.dtype, dst.dtype)] += 1
        return out


_outside_dynamo = torch._disable_dynamo(Census.count, recursive=True)


def downcasts(casts: Mapping[tuple[torch.dtype, torch.dtype], int], dtype: str) -> str | None:
    """The conversions to a floating dtype less precise than the problem's `dtype` ("float32"), named; else None."""
    eps = torch.finfo(getattr(torch, dtype)).eps if isinstance(getattr(torch, dtype, None), torch.dtype) else None
    bad = {f"{str(a).removeprefix('torch.')} -> {str(b).removeprefix('torch.')} x{n}"
           for (a, b), n in casts.items() if eps is not None and torch.finfo(b).eps > eps}
    return ", ".join(sorted(bad)) or None


def listing(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{op} x{n}" for op, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def forbidden(counts: Mapping[str, int], policy: Policy) -> dict[str, int]:
    """The counted operators the policy does not allow."""
    allowed: set[OpClass] = {"always"}
    if policy.allow_vendor_libraries:
        allowed.add("vendor")
    if policy.allow_torch_compute:
        allowed.add("compute")
    return {op: n for op, n in counts.items() if op_class(op) not in allowed}


def violation(counts: Mapping[str, int], policy: Policy) -> str | None:
    """Why the census breaks the policy, naming the ops and their counts; None when it does not."""
    bad = forbidden(counts, policy)
    if not bad:
        return None
    what = "compute" if any(op_class(op) == "compute" for op in bad) else "call cuBLAS/cuDNN"
    may = ["kernels", "allocation/views/copies"]
    if policy.allow_torch_compute:
        may.append("torch compute ops")
    if policy.allow_vendor_libraries:
        rule = f"{', '.join(may)} and (allowed by policy) cuBLAS/cuDNN matmul/convolution may run"
    else:
        rule = f"{', '.join(may[:-1])} and {may[-1]} may run (this policy forbids cuBLAS/cuDNN matmul/convolution)"
    return f"policy: the candidate's forward calls torch ops that {what} ({listing(bad)}); only {rule}"
