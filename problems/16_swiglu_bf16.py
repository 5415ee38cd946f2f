"""SwiGLU feed-forward gate in bfloat16: silu(x @ W1^T) * (x @ W3^T), two bias-free nn.Linear projections.
Fusion: two tensor-core GEMMs sharing the same input, plus an elementwise gate that can live in the GEMM epilogue."""

import torch
import torch.nn as nn
import torch.nn.functional as F

num_tokens = 8192
hidden_dim = 4096
ffn_dim = 14336


class Model(nn.Module):
    def __init__(self, hidden_dim, ffn_dim):
        super().__init__()
        self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False, dtype=torch.bfloat16)
        self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return F.silu(self.w1(x)) * self.w3(x)


def get_inputs():
    return [torch.randn(num_tokens, hidden_dim, dtype=torch.bfloat16)]


def get_init_inputs():
    return [hidden_dim, ffn_dim]


WORKLOADS = {
    "gpu": [
        dict(num_tokens=8192, hidden_dim=4096, ffn_dim=14336),
        dict(num_tokens=2048, hidden_dim=8192, ffn_dim=28672),
    ],
    "cpu": [dict(num_tokens=7, hidden_dim=24, ffn_dim=19), dict(num_tokens=32, hidden_dim=9, ffn_dim=32)],
}
