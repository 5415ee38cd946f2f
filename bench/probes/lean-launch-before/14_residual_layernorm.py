import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_row_resident(p0, p1, p2, p3, out, D, r2, r3, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o2 = (row % r2).to(tl.int64) * D
    o3 = (row % r3).to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.load(p1 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v2 = v0 + v1
    v3 = tl.load(p2 + o2 + cols, mask=mask, other=0.0).to(tl.float32)
    v4 = tl.load(p3 + o3 + cols, mask=mask, other=0.0).to(tl.float32)
    v5 = tl.sum(tl.where(mask, v2, 0.0), axis=0)
    v6 = v5 / D
    v7 = v2 - v6
    v8 = v7 * v7
    v9 = tl.sum(tl.where(mask, v8, 0.0), axis=0)
    v10 = tl.rsqrt(v9 / D + s0)
    v11 = v7 * v10
    v12 = v11 * v3
    v13 = v12 + v4
    tl.store(out + base + cols, v13.to(out.dtype.element_ty), mask=mask)


@triton.jit
def _kf_row_looped(p0, p1, p2, p3, out, D, r2, r3, s0, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    o2 = (row % r2).to(tl.int64) * D
    o3 = (row % r3).to(tl.int64) * D
    mu_v9 = tl.zeros([BLOCK_D], dtype=tl.float32)
    m2_v9 = tl.zeros([BLOCK_D], dtype=tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v1 = tl.load(p1 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v2 = v0 + v1
        w_v9 = tl.where(mask, v2, 0.0)
        inv_v9 = 1.0 / (start // BLOCK_D + 1)
        delta_v9 = w_v9 - mu_v9
        mu_v9 += tl.where(mask, delta_v9 * inv_v9, 0.0)
        m2_v9 += tl.where(mask, delta_v9 * (w_v9 - mu_v9), 0.0)
        start += BLOCK_D
    n_v9 = ((D - tl.arange(0, BLOCK_D) + BLOCK_D - 1) // BLOCK_D).to(tl.float32)
    v5 = tl.sum(n_v9 * mu_v9, axis=0)
    v6 = v5 / D
    v9 = tl.sum(m2_v9 + n_v9 * (mu_v9 - v6) * (mu_v9 - v6), axis=0)
    v10 = tl.rsqrt(v9 / D + s0)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v1 = tl.load(p1 + base + cols, mask=mask, other=0.0).to(tl.float32)
        v2 = v0 + v1
        v3 = tl.load(p2 + o2 + cols, mask=mask, other=0.0).to(tl.float32)
        v4 = tl.load(p3 + o3 + cols, mask=mask, other=0.0).to(tl.float32)
        v7 = v2 - v6
        v11 = v7 * v10
        v12 = v11 * v3
        v13 = v12 + v4
        tl.store(out + base + cols, v13.to(out.dtype.element_ty), mask=mask)
        start += BLOCK_D


class _Reference(nn.Module):
    def __init__(self, normalized_dim):
        super().__init__()
        self.norm = nn.LayerNorm(normalized_dim, eps=1e-5, elementwise_affine=True)
        with torch.no_grad():
            self.norm.weight.add_(0.1 * torch.randn(normalized_dim))
            self.norm.bias.add_(0.1 * torch.randn(normalized_dim))

    def forward(self, x, residual):
        return self.norm(x + residual)

class ModelNew(_Reference):
    def forward(self, x, residual):
        p0 = x.contiguous()
        p1 = residual.contiguous()
        p2 = self.norm.weight.contiguous()
        p3 = self.norm.bias.contiguous()
        out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
        D = p0.shape[-1]
        rows = p0.numel() // D
        block_d = triton.next_power_of_2(D)
        if block_d <= 16384:
            _kf_row_resident[(rows,)](p0, p1, p2, p3, out, D, p2.numel() // D, p3.numel() // D, self.norm.eps, BLOCK_D=block_d, num_warps=max(max(1, min(8, block_d // 256)), min(32, block_d // 1024)))
        else:
            _kf_row_looped[(rows,)](p0, p1, p2, p3, out, D, p2.numel() // D, p3.numel() // D, self.norm.eps, BLOCK_D=16384, num_warps=8)
        return out
