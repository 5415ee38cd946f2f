"""torch.fx tracing, one at a time per process, never beside in-process model code.

`torch.fx.symbolic_trace` (and make_fx, built on the same Tracer) replaces `torch.nn.Module.__call__` and
`__getattr__` on the class, for the whole process, while it traces. Any other thread that calls a module in that
window enters the tracer instead: an inline verify's reference call then raises "module is not installed as a
submodule" while a proposal traces the problem in another thread (flows/search/agents.py proposes concurrently;
docs/LOG.md). Two traces that overlap also restore each other's patches in the
wrong order, which can leave the tracer's wrapper installed for good.

So every trace holds LOCK, and so does every inline stage that runs model code (stages/executors/run.py). Stages in a
subprocess or a container have their own interpreter and need no lock. The module imports torch only to trace.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch.fx
    from torch import nn

LOCK = threading.RLock()  # re-entrant: an inline stage that holds it may trace


def trace_with_shapes(model: nn.Module, inputs: list[Any]) -> torch.fx.GraphModule:
    """Symbolic trace of model, with every node's shape and dtype in node.meta['tensor_meta'] from inputs."""
    import torch.fx  # here: the executor takes LOCK without importing torch
    from torch.fx.passes.shape_prop import ShapeProp

    with LOCK:
        graph = torch.fx.symbolic_trace(model)
        ShapeProp(graph).propagate(*inputs)
    return graph
