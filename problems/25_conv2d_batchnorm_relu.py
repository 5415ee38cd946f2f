"""3x3 convolution (nn.Conv2d, padding 1, no bias), then BatchNorm (nn.BatchNorm2d in inference form: running
statistics), then ReLU, NCHW float32: the ResNet block.
Fusion: in inference the BatchNorm is a per-channel scale and shift, so scale, shift and ReLU fold into the
convolution's epilogue (or the scale into its weights): one pass over the output instead of three."""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 128
out_channels = 128
height = 56
width = 56
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        with torch.no_grad():  # a trained network's statistics and affine parameters, not the identity
            self.bn.running_mean.uniform_(-0.2, 0.2)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, in_channels, height, width)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]


WORKLOADS = {
    "gpu": [
        dict(batch_size=32, in_channels=128, out_channels=128, height=56, width=56),
        dict(batch_size=64, in_channels=64, out_channels=64, height=112, width=112),
    ],
    "cpu": [
        dict(batch_size=2, in_channels=3, out_channels=5, height=9, width=11),
        dict(batch_size=1, in_channels=4, out_channels=3, height=7, width=6),
    ],
}
