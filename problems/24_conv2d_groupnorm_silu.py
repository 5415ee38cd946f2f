"""3x3 convolution (nn.Conv2d, padding 1), then GroupNorm (nn.GroupNorm, affine), then SiLU, NCHW float32: the block
of a diffusion U-Net.
Fusion: a convolution followed by a normalization whose statistics span a group of channels and the whole image, so
the epilogue needs a reduction across output tiles (a second pass or a split reduction) before the affine SiLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
in_channels = 128
out_channels = 128
num_groups = 32
height = 128
width = 128
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, num_groups):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2)
        self.norm = nn.GroupNorm(num_groups, out_channels)
        with torch.no_grad():  # a trained norm's affine parameters, not the identity
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return F.silu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size, num_groups]


WORKLOADS = {
    "gpu": [
        dict(batch_size=16, in_channels=128, out_channels=128, num_groups=32, height=128, width=128),
        dict(batch_size=32, in_channels=256, out_channels=256, num_groups=32, height=32, width=32),
    ],
    "cpu": [
        dict(batch_size=2, in_channels=3, out_channels=8, num_groups=4, height=7, width=9),
        dict(batch_size=1, in_channels=5, out_channels=6, num_groups=3, height=5, width=11),
    ],
}
