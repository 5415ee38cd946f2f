"""Row-wise softmax over the last dimension of a 2-D float32 tensor.
Memory-bound: one read and one write per element, plus a max and a sum per row (online softmax fits in one pass)."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [
        dict(batch_size=32768, dim=8192),
        dict(batch_size=262144, dim=1024),
        dict(batch_size=2048, dim=131072),
    ],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=3, dim=600)],
}
