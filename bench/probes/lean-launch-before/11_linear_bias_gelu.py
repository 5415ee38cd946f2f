import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_tanh(x):
    t = tl.exp(-2.0 * tl.abs(x))
    y = (1.0 - t) / (1.0 + t)
    return tl.where(x < 0.0, -y, y)


@triton.jit
def _kf_epilogue(y0, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc0 = tl.load(y0 + offs, mask=mask, other=0.0).to(tl.float32)
    v0 = acc0
    v1 = 0.5 * v0 * (1.0 + _kf_tanh(0.7978845608028654 * (v0 + 0.044715 * v0 * v0 * v0)))
    tl.store(out + offs, v1.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features, bias=True)

    def forward(self, x):
        return F.gelu(self.linear(x), approximate="tanh")

class ModelNew(_Reference):
    def forward(self, x):
        y0 = torch.addmm(self.linear.bias, x, self.linear.weight.t())
        out = torch.empty(y0.shape, device=y0.device, dtype=torch.float32)
        n = y0.numel()
        _kf_epilogue[(triton.cdiv(n, 1024),)](y0, out, n, BLOCK=1024, num_warps=4)
        return out
