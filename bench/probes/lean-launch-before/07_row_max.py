import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_row_resident(p0, out, D, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.max(tl.where(mask, v0, float("-inf")), axis=0)
    tl.store(out + row, v1.to(out.dtype.element_ty))


@triton.jit
def _kf_row_looped(p0, out, D, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    acc_v1 = tl.full([BLOCK_D], float("-inf"), tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        acc_v1 = tl.maximum(acc_v1, tl.where(mask, v0, float("-inf")))
        start += BLOCK_D
    v1 = tl.max(acc_v1, axis=0)
    tl.store(out + row, v1.to(out.dtype.element_ty))


class _Reference(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.amax(x, dim=-1)

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        out = torch.empty(p0.shape[:-1], device=p0.device, dtype=torch.float32)
        D = p0.shape[-1]
        rows = p0.numel() // D
        block_d = triton.next_power_of_2(D)
        if block_d <= 16384:
            _kf_row_resident[(rows,)](p0, out, D, BLOCK_D=block_d, num_warps=max(max(1, min(16, block_d // 256)), min(32, block_d // 1024)))
        else:
            _kf_row_looped[(rows,)](p0, out, D, BLOCK_D=16384, num_warps=16)
        return out
