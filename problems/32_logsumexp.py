"""Logsumexp over the last dim of a 2-D tensor (the log-partition of a vocabulary's logits), one value per row,
float32.
Memory-bound reduction with a tiny output: an online (running max, rescaled sum) pass reads each row once; it must
stay finite for large logits (max-subtraction)."""

import torch
import torch.nn as nn

batch_size = 4096
dim = 32768


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.logsumexp(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=4096, dim=32768), dict(batch_size=262144, dim=512), dict(batch_size=16, dim=4194304)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=2, dim=1000)],
}
