import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_row_resident(p0, p1, p2, out, D, r0, r1, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o0 = (row % r0).to(tl.int64) * D
    o1 = (row % r1).to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    v0 = tl.load(p0 + o0 + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.load(p1 + o1 + cols, mask=mask, other=0.0).to(tl.float32)
    v2 = tl.load(p2 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v3 = tl.sum(tl.where(mask, v2, 0.0), axis=0)
    v4 = v3 / D
    v5 = v2 - v4
    v6 = v5 * v5
    v7 = tl.sum(tl.where(mask, v6, 0.0), axis=0)
    v8 = tl.rsqrt(v7 / D + s0)
    v9 = v5 * v8
    v10 = v9 * v0
    v11 = v10 + v1
    tl.store(out + base + cols, v11.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _kf_row_looped(p0, p1, p2, out, D, r0, r1, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o0 = (row % r0).to(tl.int64) * D
    o1 = (row % r1).to(tl.int64) * D
    mu_v7 = tl.zeros([BLOCK_D], dtype=tl.float32)
    m2_v7 = tl.zeros([BLOCK_D], dtype=tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v2 = tl.load(p2 + base + cols, mask=mask, other=0.0).to(tl.float32)
        w_v7 = tl.where(mask, v2, 0.0)
        inv_v7 = 1.0 / (start // BLOCK_D + 1)
        delta_v7 = w_v7 - mu_v7
        mu_v7 += tl.where(mask, delta_v7 * inv_v7, 0.0)
        m2_v7 += tl.where(mask, delta_v7 * (w_v7 - mu_v7), 0.0)
        start += BLOCK_D
    n_v7 = ((D - tl.arange(0, BLOCK_D) + BLOCK_D - 1) // BLOCK_D).to(tl.float32)
    v3 = tl.sum(n_v7 * mu_v7, axis=0)
    v4 = v3 / D
    v7 = tl.sum(m2_v7 + n_v7 * (mu_v7 - v4) * (mu_v7 - v4), axis=0)
    v8 = tl.rsqrt(v7 / D + s0)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + o0 + cols, mask=mask, other=0.0).to(tl.float32)
        v1 = tl.load(p1 + o1 + cols, mask=mask, other=0.0).to(tl.float32)
        v2 = tl.load(p2 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v5 = v2 - v4
        v9 = v5 * v8
        v10 = v9 * v0
        v11 = v10 + v1
        tl.store(out + base + cols, v11.to(out.dtype.element_ty), mask=mask)
        start += BLOCK_D


class _Reference(nn.Module):
    def __init__(self, normalized_dim):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim, eps=1e-5, elementwise_affine=True)
        with torch.no_grad():  # non-trivial affine so a kernel that ignores it is caught
            self.norm.weight.add_(0.1 * torch.randn(normalized_dim))
            self.norm.bias.add_(0.1 * torch.randn(normalized_dim))

    def forward(self, x):
        return self.norm(x)

class ModelNew(_Reference):
    def forward(self, x):
        p0 = self.norm.weight.contiguous()
        p1 = self.norm.bias.contiguous()
        p2 = x.contiguous()
        out = torch.empty(p2.shape, device=p2.device, dtype=torch.float32)
        D = p2.shape[-1]
        rows = p2.numel() // D
        block_d = triton.next_power_of_2(D)
        if block_d <= 16384:
            _kf_row_resident[(rows,)](p0, p1, p2, out, D, p0.numel() // D, p1.numel() // D, self.norm.eps, BLOCK_D=block_d, num_warps=max(max(1, min(8, block_d // 256)), min(32, block_d // 1024)))
        else:
            _kf_row_looped[(rows,)](p0, p1, p2, out, D, p0.numel() // D, p1.numel() // D, self.norm.eps, BLOCK_D=16384, num_warps=16)
        return out
