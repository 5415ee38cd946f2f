"""Masked, temperature-scaled softmax over the keys: scores (B, H, S, S) with the masked keys filled with -inf
(masked_fill with a key-padding mask (B, 1, 1, S) broadcast over heads and queries), divided by a temperature, then
softmax over the last dim, float32.
Fusion: mask, scale and a row softmax in one memory-bound pass; the boolean mask is tiny and re-read per head."""

import torch
import torch.nn as nn

batch_size = 16
num_heads = 16
seq_len = 1024
temperature = 0.7


class Model(nn.Module):
    def __init__(self, temperature):
        super().__init__()
        self.temperature = temperature

    def forward(self, scores, mask):
        return torch.softmax(scores.masked_fill(mask, float("-inf")) / self.temperature, dim=-1)


def get_inputs():
    mask = torch.rand(batch_size, 1, 1, seq_len) < 0.25  # padding: about a quarter of the keys masked
    mask[..., 0] = False  # never a fully masked row (its softmax is NaN)
    return [torch.randn(batch_size, num_heads, seq_len, seq_len), mask]


def get_init_inputs():
    return [temperature]


WORKLOADS = {
    "gpu": [dict(batch_size=16, num_heads=16, seq_len=1024), dict(batch_size=2, num_heads=8, seq_len=4096)],
    "cpu": [dict(batch_size=2, num_heads=3, seq_len=13), dict(batch_size=1, num_heads=2, seq_len=31)],
}
