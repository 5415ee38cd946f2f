"""Mean over the middle dim of a (batch, seq, hidden) tensor (mean pooling over the sequence), float32.
Memory-bound reduction over a strided dim: the reduced elements of one output lie a whole row apart, so a kernel
reads contiguous hidden-dim tiles and accumulates down the sequence (split across blocks for long sequences)."""

import torch
import torch.nn as nn

batch_size = 64
seq_len = 4096
hidden = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [
        dict(batch_size=64, seq_len=4096, hidden=1024),
        dict(batch_size=8, seq_len=32768, hidden=768),
        dict(batch_size=4096, seq_len=64, hidden=1024),
    ],
    "cpu": [dict(batch_size=3, seq_len=17, hidden=23), dict(batch_size=2, seq_len=100, hidden=9)],
}
