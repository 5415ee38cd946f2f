"""2-D max pooling, 3x3 window, stride 2, padding 1 (nn.MaxPool2d: the ResNet stem's), NCHW float32.
Memory-bound: each input element is read by up to four overlapping windows, so the kernel should read each input
row once (from cache) and write the quarter-size output once."""

import torch
import torch.nn as nn

batch_size = 128
channels = 64
height = 224
width = 224
kernel_size = 3
stride = 2
padding = 1


class Model(nn.Module):
    def __init__(self, kernel_size, stride, padding):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(batch_size, channels, height, width)]


def get_init_inputs():
    return [kernel_size, stride, padding]


WORKLOADS = {
    "gpu": [
        dict(batch_size=128, channels=64, height=224, width=224),
        dict(batch_size=32, channels=256, height=113, width=113),
    ],
    "cpu": [
        dict(batch_size=2, channels=3, height=9, width=11),
        dict(batch_size=1, channels=5, height=16, width=7),
    ],
}
