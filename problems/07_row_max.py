"""Maximum over the last dimension of a 2-D tensor (values only, so ties cannot change the answer).
Memory-bound reduction; like the row mean but with an exact result, so any lost element shows up."""

import torch
import torch.nn as nn

batch_size = 8192
dim = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=8192, dim=65536), dict(batch_size=524288, dim=1024)],
    "cpu": [dict(batch_size=5, dim=100), dict(batch_size=3, dim=555)],
}
