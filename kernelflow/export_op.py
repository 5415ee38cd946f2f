"""A verified ModelNew as a torch custom op, so that it composes with torch.compile (inference only: no backward).

Copied verbatim into every export as op.py (kernelflow/export.py); it imports only torch. The export's __init__
calls `custom_op_model(name, ModelNew, Model, returns_tuple)` and gets OpModel: a ModelNew (same constructor,
parameters, buffers and state_dict) whose forward calls the op `name`:
- the op takes a handle to the model and the forward's tensors and runs ModelNew.forward on that model, so the
  weights are the module's own (moved, loaded and cast as usual);
- its fake implementation, which torch.compile traces with, builds the problem's reference Model with the same
  constructor arguments under the fake mode (no memory, no kernel) and runs it on the fake inputs: the outputs'
  shapes and dtypes are the reference's, which verification held the kernel to. Outputs are contiguous.
"""

from __future__ import annotations

import itertools
import weakref
from typing import Any, cast

import torch
from torch import nn

_MODELS: weakref.WeakValueDictionary[int, nn.Module] = weakref.WeakValueDictionary()
_HANDLES = itertools.count()


def _as_list(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def custom_op_model(name: str, model_new: type[nn.Module], reference: type[nn.Module],
                    returns_tuple: bool) -> type[nn.Module]:
    """OpModel for ModelNew, its forward the custom op `name` ("namespace::op"), fake outputs from `reference`."""
    namespace, op = name.split("::")
    if hasattr(getattr(torch.ops, namespace), op):  # a second definition would silently replace the first one's
        raise RuntimeError(f"the custom op {name} is already defined in this process: import this export once")

    @torch.library.custom_op(name, mutates_args=())
    def kernel(handle: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [out.contiguous() for out in _as_list(model_new.forward(_MODELS[handle], *inputs))]

    @kernel.register_fake
    def _(handle: int, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        args, kwargs = cast(tuple[tuple, dict], _MODELS[handle].kf_init_args)
        with torch.device(inputs[0].device):
            ref = reference(*args, **kwargs)
        return [torch.empty_like(out, memory_format=torch.contiguous_format) for out in _as_list(ref(*inputs))]

    class OpModel(model_new):  # type: ignore[valid-type,misc]
        def __init__(self, *args: Any, **kwargs: Any):
            super().__init__(*args, **kwargs)
            self.kf_init_args = (args, kwargs)
            self._kf_register()

        def _kf_register(self) -> None:
            self.kf_handle = next(_HANDLES)
            _MODELS[self.kf_handle] = self

        def __setstate__(self, state: dict[str, Any]) -> None:  # a copy (deepcopy, pickle) gets its own handle
            super().__setstate__(state)
            self._kf_register()

        def forward(self, *inputs: Any) -> Any:
            if not all(isinstance(x, torch.Tensor) for x in inputs):
                raise TypeError(f"{name} takes tensors only; call ModelNew directly for other arguments")
            outs = kernel(self.kf_handle, list(inputs))
            return tuple(outs) if returns_tuple else outs[0]

    OpModel.__name__ = OpModel.__qualname__ = "OpModel"
    return OpModel
