"""Linear layer (x @ W^T + b, nn.Linear), then logsumexp over the output features: one value per row, float32.
Fusion: a compute-bound GEMM whose epilogue is a reduction over the feature dim: a fused kernel keeps a running max
and sum per row across its N tiles (or combines per-tile partials) and never writes the output matrix."""

import torch
import torch.nn as nn

batch_size = 4096
in_features = 4096
out_features = 4096


class Model(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return torch.logsumexp(self.linear(x), dim=1)


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]


WORKLOADS = {
    "gpu": [
        dict(batch_size=4096, in_features=4096, out_features=4096),
        dict(batch_size=1024, in_features=2048, out_features=32768),
    ],
    "cpu": [
        dict(batch_size=7, in_features=24, out_features=19),
        dict(batch_size=3, in_features=5, out_features=32),
    ],
}
