"""LayerNorm over the last dimension with a learned weight and bias (nn.LayerNorm, eps=1e-5).
Memory-bound: mean and variance per row, then a normalise-scale-shift pass; row length decides the kernel shape."""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self, normalized_dim):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim, eps=1e-5, elementwise_affine=True)
        with torch.no_grad():  # non-trivial affine so a kernel that ignores it is caught
            self.norm.weight.add_(0.1 * torch.randn(normalized_dim))
            self.norm.bias.add_(0.1 * torch.randn(normalized_dim))

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


WORKLOADS = {
    "gpu": [
        dict(batch_size=32768, dim=8192),
        dict(batch_size=262144, dim=1024),
        dict(batch_size=4096, dim=65536),
    ],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=4, dim=333)],
}
