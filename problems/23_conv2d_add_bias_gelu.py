"""3x3 convolution (nn.Conv2d, padding 1, its own bias), then a learned per-channel bias added, then exact GELU, NCHW
float32.
Fusion: a compute-bound convolution (implicit GEMM) whose epilogue (a broadcast channel bias and an erf GELU) can be
applied to the output tile before it is written, instead of two extra passes over a large output."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
in_channels = 64
out_channels = 128
height = 112
width = 112
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.bias = nn.Parameter(torch.randn(out_channels, 1, 1) * 0.1)

    def forward(self, x):
        return F.gelu(self.conv(x) + self.bias)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


WORKLOADS = {
    "gpu": [
        dict(batch_size=64, in_channels=64, out_channels=128, height=112, width=112),
        dict(batch_size=16, in_channels=256, out_channels=256, height=56, width=56),
    ],
    "cpu": [
        dict(batch_size=2, in_channels=3, out_channels=5, height=9, width=11),
        dict(batch_size=1, in_channels=4, out_channels=3, height=7, width=6),
    ],
}
