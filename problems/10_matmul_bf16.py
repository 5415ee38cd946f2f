"""bfloat16 matrix product C = A @ B of two bf16 inputs, A (M, K) and B (K, N), bf16 output.
Compute-bound on tensor cores (~700 TFLOP/s on an H200): the test of whether a kernel uses wgmma/mma well."""

import torch
import torch.nn as nn

M = 8192
K = 8192
N = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.bfloat16), torch.randn(K, N, dtype=torch.bfloat16)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(M=8192, K=8192, N=8192), dict(M=16384, K=4096, N=4096), dict(M=2048, K=8192, N=28672)],
    "cpu": [dict(M=17, K=23, N=29), dict(M=32, K=7, N=19)],
}
