"""GELU with the tanh approximation, written out: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
Purely elementwise and memory-bound; eager PyTorch runs it as ~8 separate kernels, so fusing them is the whole win."""

import math

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
        return 0.5 * x * (1.0 + torch.tanh(inner))


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=13, dim=127)],
}
