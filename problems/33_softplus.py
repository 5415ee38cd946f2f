"""Softplus, log(1 + exp(x)) (beta 1, threshold 20: x itself above it), elementwise on a 2-D tensor, float32.
Memory-bound elementwise op; it must stay accurate for large |x| (log1p(exp(-|x|)) + max(x, 0), not a naive
log(1 + exp(x)), which overflows above ~88 and loses everything below ~-17)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return F.softplus(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=1, dim=1999)],
}
