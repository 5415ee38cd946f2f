"""Scaled running sum along the last dim: y = cumsum(x * scale, dim=-1), an inclusive scan of each row.
Fusion: the scale and the scan in one memory-bound pass (eager writes x * scale out and reads it back); a long row
(32771) needs the running total carried across chunks of the row.

Tolerance: the default fp32 one (1e-4 relative, 1e-4 x RMS absolute) against the float64 reference. Even a fully
sequential fp32 sum, one rounding per step (the worst order; a chunked scan is far better), drifts by about
u * scale * k / sqrt(6) after k steps (u = 2**-24), against the allowed 1e-4 * RMS = 1e-4 * scale * sqrt(D / 2):
at D = 32771 that is 0.06 of the tolerance per standard deviation, 0.13 at the worst element when simulated on
512 rows under every input distribution (shifted inputs grow the sum linearly and its RMS with it: 0.06).
"""

import torch
import torch.nn as nn

batch_size = 32768
dim = 8192
scale = 0.1


class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.cumsum(x * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [scale]


WORKLOADS = {
    "gpu": [
        dict(batch_size=32768, dim=8192),
        dict(batch_size=262144, dim=1024),
        dict(batch_size=8191, dim=32771),
    ],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=3, dim=600)],
}
