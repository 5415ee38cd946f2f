"""3x3 convolution with bias (nn.Conv2d, padding 1), then ReLU, then multiplication by a constant, NCHW float32.
Fusion: a compute-bound convolution (implicit GEMM) whose bias/ReLU/scale epilogue can be fused into the output write."""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 128
height = 128
width = 128
kernel_size = 3
multiplier = 0.5


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=True)
        self.multiplier = multiplier

    def forward(self, x):
        return torch.relu(self.conv(x)) * self.multiplier


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, multiplier]


WORKLOADS = {
    "gpu": [
        dict(batch_size=32, in_channels=64, out_channels=128, height=128, width=128),
        dict(batch_size=16, in_channels=256, out_channels=256, height=56, width=56),
    ],
    "cpu": [
        dict(batch_size=2, in_channels=3, out_channels=5, height=9, width=11),
        dict(batch_size=1, in_channels=4, out_channels=3, height=7, width=6),
    ],
}
