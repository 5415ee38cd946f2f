"""Fresh inputs per trial, from several distributions of the problem's own shapes and dtypes.

Every distribution starts from a fresh draw of get_inputs() (new seed) and reshapes its floating tensors'
values; integer tensors keep the fresh draw. A distribution on which the reference itself is not finite is
skipped for that problem (and counted), never silently passed.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages.contracts import Workload
from kernelflow.stages.problems.kernelbench import workload_call


def _uniform(x: torch.Tensor) -> torch.Tensor:
    lo, hi = x.min(), x.max()
    return torch.rand_like(x) * (hi - lo) + lo


def _sparse(x: torch.Tensor) -> torch.Tensor:
    return x * (torch.rand_like(x) > 0.5)


DISTRIBUTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "declared": lambda x: x,  # the problem's own get_inputs()
    "uniform": _uniform,  # uniform over the declared sample's range
    "scaled": lambda x: x * 8,  # large magnitudes: catches missing max-subtraction, overflow
    "shifted": lambda x: x + 2 * x.std(),  # a large mean: catches one-pass variance, cancellation
    "sparse": _sparse,  # half zeros (never all zeros)
}


def trial_seed(base: int, *parts: object) -> int:
    digest = hashlib.sha256(repr((base, *parts)).encode()).digest()
    return int.from_bytes(digest[:7], "little")


def draw(module: ModuleType, workload: Workload, seed: int, distribution: str, device: str) -> list[Any]:
    torch.manual_seed(seed)
    values = workload_call(module, workload, "get_inputs", device=device)
    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            v = v.to(device)
            if v.is_floating_point():
                v = DISTRIBUTIONS[distribution](v.float()).to(v.dtype).contiguous()
        out.append(v)
    return out


def upcast(values: list[Any]) -> list[Any]:
    return [v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def clone(values: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def nbytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))
