"""Mean over the last dimension of a 2-D tensor, producing one value per row.
Memory-bound reduction with a tiny output: bandwidth and the split of long rows across blocks decide speed."""

import torch
import torch.nn as nn

batch_size = 8192
dim = 65536


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [
        dict(batch_size=8192, dim=65536),
        dict(batch_size=524288, dim=1024),
        dict(batch_size=64, dim=8388608),
    ],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=2, dim=1000)],
}
