"""SELU, scale * (max(0, x) + min(0, alpha * (exp(x) - 1))) with SELU's fixed alpha and scale, elementwise on a 2-D
tensor, float32.
Memory-bound elementwise op; the negative branch wants expm1 (exp(x) - 1 cancels for small |x|)."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.selu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=1, dim=1999)],
}
