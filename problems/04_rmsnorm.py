"""RMSNorm over the last dimension: x * rsqrt(mean(x^2) + eps) * weight, with its own weight parameter.
Memory-bound row reduction (one statistic instead of LayerNorm's two), the normaliser of most current LLMs."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192
eps = 1e-6


class Model(nn.Module):
    def __init__(self, hidden_dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim, eps]


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=262144, dim=1024)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=3, dim=513)],
}
