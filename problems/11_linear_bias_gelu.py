"""Linear layer (x @ W^T + b, nn.Linear) followed by tanh-approximate GELU, float32.
Fusion: a compute-bound GEMM whose epilogue (bias + GELU) can be applied in registers instead of two extra passes over the output."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8192
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return F.gelu(self.linear(x), approximate="tanh")


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


WORKLOADS = {
    "gpu": [
        dict(batch_size=8192, in_features=4096, out_features=4096),
        dict(batch_size=32768, in_features=1024, out_features=4096),
    ],
    "cpu": [
        dict(batch_size=7, in_features=24, out_features=19),
        dict(batch_size=32, in_features=5, out_features=32),
    ],
}
