"""Mean squared error of two tensors: F.mse_loss(predictions, targets) = mean((p - t)^2), a 0-dim output.
Memory-bound whole-tensor reduction: both inputs read once; the 2^28 partial sums must be combined across the
whole GPU, deterministically (a second call must give the same bits, so no float atomics).

Tolerance: the default fp32 one against the float64 reference; for a scalar it allows 2e-4 x |ref|. All terms
are positive, so a sum's relative error is at most u = 2^-24 per addition on the path of each term: a blocked
sum (64 sequential adds per lane at the first gpu shape, then trees of 12 and 10 levels) stays within about
90 u = 5e-6 in the worst case, 40x inside the tolerance, under every input distribution.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
dim = 8192


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.mse_loss(predictions, targets)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, dim=8192), dict(batch_size=8191, dim=32771)],
    "cpu": [dict(batch_size=7, dim=96), dict(batch_size=3, dim=513), dict(batch_size=1, dim=1999)],
}
