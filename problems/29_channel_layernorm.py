"""Layer normalization over the channel dim of an NCHW tensor (ConvNeXt's channels-first LayerNorm): per pixel, mean
and variance over C, then a per-channel weight and bias, float32.
Memory-bound: the reduction runs over a strided middle dim (stride H*W), not the contiguous last one: a kernel must read
whole channel columns of a pixel tile at once, coalesced along the pixels, and write the normalized tile once."""

import torch
import torch.nn as nn

batch_size = 32
channels = 128
height = 128
width = 128
eps = 1e-6


class Model(nn.Module):
    def __init__(self, channels, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = nn.Parameter(torch.randn(channels) * 0.1)
        self.eps = eps

    def forward(self, x):
        mean = x.mean(dim=1, keepdim=True)
        var = (x - mean).pow(2).mean(dim=1, keepdim=True)
        x = (x - mean) / torch.sqrt(var + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [channels, eps]


WORKLOADS = {
    "gpu": [
        dict(batch_size=32, channels=128, height=128, width=128),
        dict(batch_size=16, channels=384, height=112, width=112),
    ],
    "cpu": [
        dict(batch_size=2, channels=7, height=9, width=11),
        dict(batch_size=1, channels=33, height=5, width=6),
    ],
}
