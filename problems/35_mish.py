"""Mish, x * tanh(softplus(x)), elementwise on a 2-D tensor, float32.
Memory-bound elementwise op with a costly body (exp, log1p, tanh per element); softplus must not overflow for large
x, where mish(x) -> x."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.mish(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=1, dim=1999)],
}
