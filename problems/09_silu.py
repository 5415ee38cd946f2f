"""SiLU (swish): x * sigmoid(x), elementwise on a 2-D tensor.
Memory-bound elementwise op; the sigmoid must stay finite for large |x| (exp overflow in a naive 1/(1+exp(-x)) is fine, a naive exp(x)/(1+exp(x)) is not)."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=1, dim=1999)],
}
