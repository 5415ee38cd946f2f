"""Transposed 3x3 convolution (nn.ConvTranspose2d, stride 2: doubles height and width), then 2x2 max pooling (stride
2), then hardtanh to [-1, 1], NCHW float32.
Fusion: the upsampled output is pooled straight back down, so a fused kernel can pool and clamp each output tile in
registers and never write the 4x larger intermediate."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
in_channels = 128
out_channels = 64
height = 64
width = 64
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.ConvTranspose2d(in_channels, out_channels, kernel_size, stride=2, padding=kernel_size // 2,
                                       output_padding=1)
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)

    def forward(self, x):
        return F.hardtanh(self.pool(self.conv(x)), min_val=-1.0, max_val=1.0)


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


WORKLOADS = {
    "gpu": [
        dict(batch_size=64, in_channels=128, out_channels=64, height=64, width=64),
        dict(batch_size=16, in_channels=128, out_channels=32, height=96, width=96),
    ],
    "cpu": [
        dict(batch_size=2, in_channels=3, out_channels=4, height=5, width=7),
        dict(batch_size=1, in_channels=2, out_channels=3, height=6, width=3),
    ],
}
