"""Cross-entropy of logits [N, C] with class-index targets [N]: F.cross_entropy(logits, targets), the mean over
rows of logsumexp(logits[i]) - logits[i, targets[i]], a 0-dim output.
Memory-bound: the logits are read once (an online logsumexp per row, max-subtracted), the targets gather one logit
per row, and the rows' losses are reduced across the GPU deterministically. Eager writes the whole log_softmax
out and reads it back for nll_loss. Shapes: an LLM vocabulary (32000, Llama-3's 128256) and ImageNet's 1000.

Targets are int64 draws in [0, C): the harness reshapes float inputs only, so every distribution keeps them valid
(ignore_index keeps its default -100, which no draw hits).
Tolerance: the default fp32 one against the float64 reference (2e-4 x |ref| for a scalar). A row's loss is about
log C + 1/2 (scaled inputs: about max logit + log C, ~40) with an fp32 error of a few u = 2^-24 relative; the
mean of positive losses adds at most ~50 u: 1e-5 relative at worst.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32768
num_classes = 32000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return F.cross_entropy(logits, targets)


def get_inputs():
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs():
    return []


WORKLOADS = {
    "gpu": [dict(batch_size=32768, num_classes=32000), dict(batch_size=8192, num_classes=128256),
            dict(batch_size=524288, num_classes=1000)],
    "cpu": [dict(batch_size=7, num_classes=96), dict(batch_size=3, num_classes=513),
            dict(batch_size=19, num_classes=101)],
}
