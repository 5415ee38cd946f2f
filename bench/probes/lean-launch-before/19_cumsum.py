import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_scan_sum(a, b):
    return a + b


@triton.jit
def _kf_scan_resident(p0, out, D, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = v0 * s0
    m_v2 = tl.where(mask, v1, 0.0)
    v2 = tl.associative_scan(m_v2, 0, _kf_scan_sum)
    tl.store(out + base + cols, v2.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _kf_scan_looped(p0, out, D, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    carry_v2 = tl.full([], 0.0, tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v1 = v0 * s0
        m_v2 = tl.where(mask, v1, 0.0)
        v2 = carry_v2 + tl.associative_scan(m_v2, 0, _kf_scan_sum)
        carry_v2 = carry_v2 + tl.reduce(m_v2, 0, _kf_scan_sum)
        tl.store(out + base + cols, v2.to(out.dtype.element_ty), mask=mask)
        start += BLOCK_D


class _Reference(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.cumsum(x * self.scale, dim=-1)

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
        D = p0.shape[-1]
        rows = p0.numel() // D
        block_d = triton.next_power_of_2(D)
        if block_d <= 8192:
            _kf_scan_resident[(rows,)](p0, out, D, self.scale, BLOCK_D=block_d, num_warps=max(1, min(4, block_d // 256)))
        else:
            _kf_scan_looped[(rows,)](p0, out, D, self.scale, BLOCK_D=8192, num_warps=4)
        return out
