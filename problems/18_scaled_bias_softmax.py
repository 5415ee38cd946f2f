"""Attention-score softmax: softmax(scores * scale + bias) over the last dim, scores (B, H, S, S), bias (H, S, S) broadcast over B.
Fusion: scale, broadcast bias add and a row softmax in one memory-bound pass; the bias is re-read per batch (cache-friendly)."""

import torch
import torch.nn as nn

batch_size = 16
num_heads = 16
seq_len = 1024
scale = 0.08838834764831845  # 1 / sqrt(128)


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, scores, bias):
        return torch.softmax(scores * self.scale + bias, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, num_heads, seq_len, seq_len), torch.randn(num_heads, seq_len, seq_len)]


def get_init_inputs():
    return [scale]


WORKLOADS = {
    "gpu": [dict(batch_size=16, num_heads=16, seq_len=1024), dict(batch_size=2, num_heads=8, seq_len=4096)],
    "cpu": [dict(batch_size=2, num_heads=3, seq_len=13), dict(batch_size=1, num_heads=2, seq_len=31)],
}
