"""Scaled matrix product plus a residual: out = (A @ B) * scale + R, float32, with scale a constructor constant.
Fusion: GEMM with an epilogue that reads a second full-size tensor; eager PyTorch writes and re-reads the product twice."""

import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096
scale = 0.125


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b, residual):
        return torch.matmul(a, b) * self.scale + residual


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N), torch.randn(M, N)]


def get_init_inputs():
    return [scale]


WORKLOADS = {
    "gpu": [dict(M=4096, K=4096, N=4096), dict(M=16384, K=512, N=4096)],
    "cpu": [dict(M=17, K=23, N=29), dict(M=9, K=32, N=11)],
}
