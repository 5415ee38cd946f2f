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
def _kf_elementwise(p0, p1, p2, out, n, start, n1, n2, s0, s1, s2, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        mask = tl.full([BLOCK], 1, tl.int1)
    else:
        mask = offs < n
    v0 = tl.load(p0 + offs, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.load(p1 + offs % n1, mask=mask, other=0.0).to(tl.float32)
    v2 = v0 * v1
    v3 = tl.load(p2 + offs % n2, mask=mask, other=0.0).to(tl.float32)
    v4 = v2 + v3
    v5 = _kf_tanh(v4)
    v6 = tl.minimum(tl.maximum(v5, s0), s1)
    v7 = v6 * s2
    tl.store(out + offs, v7.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self, dim, clamp_min, clamp_max, multiplier):
        super().__init__()
        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(dim))
        self.bias = nn.Parameter(0.5 * torch.randn(dim))
        self.clamp_min = clamp_min
        self.clamp_max = clamp_max
        self.multiplier = multiplier

    def forward(self, x):
        y = torch.tanh(x * self.scale + self.bias)
        return torch.clamp(y, self.clamp_min, self.clamp_max) * self.multiplier

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        p1 = self.scale.contiguous()
        p2 = self.bias.contiguous()
        out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
        n = p0.numel()
        full = n // 1024
        if full:
            _kf_elementwise[(full,)](p0, p1, p2, out, n, 0, p1.numel(), p2.numel(), self.clamp_min, self.clamp_max, self.multiplier, BLOCK=1024, EVEN=True, num_warps=8)
        if n % 1024:
            _kf_elementwise[(1,)](p0, p1, p2, out, n, full * 1024, p1.numel(), p2.numel(), self.clamp_min, self.clamp_max, self.multiplier, BLOCK=1024, EVEN=False, num_warps=8)
        return out
