"""Reference and candidate models at one workload, with equal weights, on a device; candidate calls guarded."""

from __future__ import annotations

import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages.contracts import Policy, Workload
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.problems.kernelbench import workload_call

_ILLEGAL = ("illegal memory access", "illegal instruction", "misaligned address", "unspecified launch failure")


def fault_of(e: BaseException) -> CandidateFault:
    """The candidate fault an exception raised by candidate code amounts to."""
    text = f"{type(e).__name__}: {e}"
    if isinstance(e, CandidateFault):
        return e
    if isinstance(e, torch.OutOfMemoryError | MemoryError) or "can't allocate memory" in str(e):
        return CandidateFault("oom", text[:2000])
    if any(s in str(e) for s in _ILLEGAL):
        return CandidateFault("illegal_address", text[:2000])
    if isinstance(e, TypeError) and "argument" in str(e):
        return CandidateFault("signature_mismatch", text[:2000])
    return CandidateFault("runtime_error", text[:2000])


def guarded(fn: Callable[..., Any], *args: Any) -> Any:
    """Call candidate code; any exception becomes a CandidateFault. Syncs so asynchronous GPU errors surface here."""
    try:
        out = fn(*args)
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
        return out
    except Exception as e:
        raise fault_of(e) from e


RECOMPILES = 64  # dynamo cache entries per code object: modes x shapes of one problem, with room to spare
MODES = {"compile": None, "compile_max": "max-autotune", "compile_max_nocg": "max-autotune-no-cudagraphs"}


def baseline(name: str, ref: torch.nn.Module) -> Any:
    """The reference as the user runs it: eager, or under torch.compile in one of its modes, specialized to the shapes
    it is called with (dynamic=False). Without that, dynamo shares what it learned between compiled copies of the same
    forward: the benchmark's second workload would recompile with symbolic shapes, and every later workload would run
    that shape-generic code, slower than what a user running one of those shapes gets (docs/LOG.md).
    Every mode and shape is then its own entry in dynamo's cache of the forward's code: past its recompile limit
    (8) dynamo would run the forward eagerly without a word (three modes on three shapes of bench_gpu
    --max-autotune pass it), so the limit is raised to RECOMPILES and reaching it raises instead."""
    if name == "eager":
        return ref
    import torch._dynamo.config as dynamo_config

    dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILES)
    dynamo_config.fail_on_recompile_limit_hit = True
    return torch.compile(ref, mode=MODES[name], dynamic=False)


def set_precision(policy: Policy) -> None:
    """The same math settings for reference, baselines and candidate, PyTorch's defaults unless the policy says
    otherwise: fp32 convolutions through cuDNN may use TF32 (Policy.conv_tf32, on by default as in PyTorch), fp32
    matmuls may not unless Policy.allow_tf32 (which allows both). A kernel's own TF32 follows allow_tf32 alone:
    Triton's tl.dot uses TF32 for fp32 operands unless told otherwise, and TRITON_F32_DEFAULT says so for a kernel
    that does not name its input_precision (one that names "tf32" fails the static checks)."""
    torch.backends.cuda.matmul.allow_tf32 = policy.allow_tf32
    torch.set_float32_matmul_precision("high" if policy.allow_tf32 else "highest")
    torch.backends.cudnn.allow_tf32 = policy.allow_tf32 or policy.conv_tf32
    os.environ["TRITON_F32_DEFAULT"] = "tf32" if policy.allow_tf32 else "ieee"


def build(module: ModuleType, new_cls: type[torch.nn.Module] | None, workload: Workload, device: str,
          seed: int) -> tuple[torch.nn.Module, torch.nn.Module | None]:
    init = workload_call(module, workload, "get_init_inputs")
    torch.manual_seed(seed)
    with torch.device(device):  # parameters are created (and initialized) on the device directly
        ref = module.Model(*init).to(device).eval()
    if new_cls is None:
        return ref, None
    torch.manual_seed(seed)
    with torch.device(device):
        new = guarded(new_cls, *init)
    own = new.state_dict()
    shared = {k: v for k, v in ref.state_dict().items() if k in own and own[k].shape == v.shape}
    new.load_state_dict(shared, strict=False)
    return ref, guarded(lambda: new.to(device).eval())
