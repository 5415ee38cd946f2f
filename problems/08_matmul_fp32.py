"""Plain float32 matrix product C = A @ B of two inputs, A (M, K) and B (K, N).
Compute-bound: 2*M*N*K FLOPs against O(M*K + K*N) bytes; tiling and data reuse decide speed."""

import torch
import torch.nn as nn

M = 4096
K = 4096
N = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(M=4096, K=4096, N=4096), dict(M=16384, K=1024, N=4096), dict(M=1024, K=16384, N=1024)],
    "cpu": [dict(M=17, K=23, N=29), dict(M=5, K=32, N=3)],
}
