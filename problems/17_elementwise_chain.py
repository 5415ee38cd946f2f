"""Elementwise chain: y = clamp(tanh(x * scale + bias), lo, hi) * multiplier, with per-column learned scale and bias.
Fusion: five eager kernels (and four intermediate tensors) collapse into one memory-bound pass."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192
clamp_min = -0.75
clamp_max = 0.5
multiplier = 2.0


class Model(nn.Module):
    def __init__(self, dim, clamp_min, clamp_max, multiplier):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.multiplier = multiplier

    def forward(self, x):
        y = torch.tanh(x * self.scale + self.bias)
        return torch.clamp(y, self.clamp_min, self.clamp_max) * self.multiplier


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, clamp_min, clamp_max, multiplier]


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=11, dim=101)],
}
