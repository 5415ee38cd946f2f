"""Scaled dot-product attention in bfloat16: softmax(q k^T / sqrt(D) [causal]) v over (B, H, S, D) heads.
Fusion: two tensor-core GEMMs per head with the row softmax between them, never writing the S x S scores (flash attention)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
num_heads = 16
seq_len = 4096
head_dim = 64
mask_mode = 1  # 1: none, every query sees every key; 2: causal, a query sees itself and the keys before it
# (WORKLOADS take positive ints only)


class Model(nn.Module):
    def __init__(self, is_causal):
        super().__init__()
        self.is_causal = is_causal

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.is_causal)


def get_inputs():
    shape = (batch_size, num_heads, seq_len, head_dim)
    return [torch.randn(shape, dtype=torch.bfloat16) for _ in range(3)]


def get_init_inputs():
    return [mask_mode == 2]

# Causal rows near the start average few keys: their outputs are ~1 while the output's RMS at S=8192 is ~0.03, so the
# bf16 rounding of the probabilities that every flash kernel (and eager) does reaches 1.04x the default atol there
# (computed: eager bf16 SDPA vs float64, 8192 x 128 causal, sparse inputs; 0.36x at 4096 x 64 full). 3e-2: eager 0.69x.
TOLERANCE = {"rtol": 2e-2, "atol": 3e-2}


WORKLOADS = {
    "gpu": [
        dict(batch_size=4, num_heads=16, seq_len=4096, head_dim=64, mask_mode=1),
        dict(batch_size=2, num_heads=16, seq_len=8192, head_dim=128, mask_mode=2),
    ],
    "cpu": [
        dict(batch_size=2, num_heads=3, seq_len=13, head_dim=16, mask_mode=1),
        dict(batch_size=1, num_heads=2, seq_len=37, head_dim=24, mask_mode=2),
        dict(batch_size=1, num_heads=2, seq_len=70, head_dim=32, mask_mode=1),
        dict(batch_size=1, num_heads=1, seq_len=150, head_dim=16, mask_mode=2),
    ],
}
