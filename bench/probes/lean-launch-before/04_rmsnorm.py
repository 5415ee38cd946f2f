import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_row_resident(p0, p1, out, D, r1, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o1 = (row % r1).to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = v0 * v0
    v2 = tl.sum(tl.where(mask, v1, 0.0), axis=0)
    v3 = v2 / D
    v4 = v3 + s0
    v5 = tl.rsqrt(v4)
    v6 = v0 * v5
    v7 = tl.load(p1 + o1 + cols, mask=mask, other=0.0).to(tl.float32)
    v8 = v6 * v7
    tl.store(out + base + cols, v8.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _kf_row_looped(p0, p1, out, D, r1, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o1 = (row % r1).to(tl.int64) * D
    acc_v2 = tl.zeros([BLOCK_D], dtype=tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v1 = v0 * v0
        acc_v2 += tl.where(mask, v1, 0.0)
        start += BLOCK_D
    v2 = tl.sum(acc_v2, axis=0)
    v3 = v2 / D
    v4 = v3 + s0
    v5 = tl.rsqrt(v4)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v6 = v0 * v5
        v7 = tl.load(p1 + o1 + cols, mask=mask, other=0.0).to(tl.float32)
        v8 = v6 * v7
        tl.store(out + base + cols, v8.to(out.dtype.element_ty), mask=mask)
        start += BLOCK_D


class _Reference(nn.Module):
    def __init__(self, hidden_dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden_dim))

    def forward(self, x):
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * rms * self.weight

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        p1 = self.weight.contiguous()
        out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
        D = p0.shape[-1]
        rows = p0.numel() // D
        block_d = triton.next_power_of_2(D)
        if block_d <= 16384:
            _kf_row_resident[(rows,)](p0, p1, out, D, p1.numel() // D, self.eps, BLOCK_D=block_d, num_warps=max(max(1, min(16, block_d // 256)), min(32, block_d // 1024)))
        else:
            _kf_row_looped[(rows,)](p0, p1, out, D, p1.numel() // D, self.eps, BLOCK_D=16384, num_warps=16)
        return out
