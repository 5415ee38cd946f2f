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
    v1 = tl.sum(tl.where(mask, v0, 0.0), axis=0)
    v2 = v1 / D
    tl.store(out + row, v2.to(out.dtype.element_ty))


@triton.jit
def _kf_row_looped(p0, out, D, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    acc_v1 = tl.zeros([BLOCK_D], dtype=tl.float32)
    start = 0
    while start < D:
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < D
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        acc_v1 += tl.where(mask, v0, 0.0)
        start += BLOCK_D
    v1 = tl.sum(acc_v1, axis=0)
    v2 = v1 / D
    tl.store(out + row, v2.to(out.dtype.element_ty))


@triton.jit
def _kf_rows_resident(p0, out, D, R, ROWS: tl.constexpr, BLOCK_D: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    row_mask = rows < R
    base = rows.to(tl.int64) * D
    cols = tl.arange(0, BLOCK_D)[None, :]
    mask = row_mask & (cols < D)
    v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.sum(tl.where(mask, v0, 0.0), axis=1, keep_dims=True)
    v2 = v1 / D
    tl.store(out + rows, v2.to(out.dtype.element_ty), mask=row_mask)


@triton.jit
def _kf_row_partial(p0, out, D, part, R, CHUNK, SPLITS, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    base = row.to(tl.int64) * D
    split = tl.program_id(1)
    acc_v1 = tl.zeros([BLOCK_D], dtype=tl.float32)
    start = split * CHUNK
    while start < tl.minimum(split * CHUNK + CHUNK, D):
        cols = start + tl.arange(0, BLOCK_D)
        mask = cols < tl.minimum(split * CHUNK + CHUNK, D)
        v0 = tl.load(p0 + base + cols, mask=mask, other=0.0).to(tl.float32)
        acc_v1 += tl.where(mask, v0, 0.0)
        start += BLOCK_D
    v1 = tl.sum(acc_v1, axis=0)
    tl.store(part + (0 * R + row) * SPLITS + split, v1)


@triton.jit
def _kf_row_combine(p0, out, D, part, R, SPLITS, SPLITS_P2: tl.constexpr):
    row = tl.program_id(0)
    s = tl.arange(0, SPLITS_P2)
    v1 = tl.sum(tl.load(part + (0 * R + row) * SPLITS + s, mask=s < SPLITS, other=0.0), axis=0)
    v2 = v1 / D
    tl.store(out + row, v2.to(out.dtype.element_ty))


class _Reference(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.mean(x, dim=-1)

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        out = torch.empty(p0.shape[:-1], device=p0.device, dtype=torch.float32)
        D = p0.shape[-1]
        rows = p0.numel() // D
        block_d = triton.next_power_of_2(D)
        if rows < 256 and D > 16384:
            splits = min(triton.cdiv(D, 16384), max(1, 1024 // max(rows, 1)))
            chunk = triton.cdiv(triton.cdiv(D, splits), 16384) * 16384
            splits = triton.cdiv(D, chunk)
            part = torch.empty((1, rows, splits), device=p0.device, dtype=torch.float32)
            _kf_row_partial[(rows, splits)](p0, out, D, part, rows, chunk, splits, BLOCK_D=16384, num_warps=max(max(1, min(16, 16384 // 256)), min(32, 16384 // 1024)))
            _kf_row_combine[(rows,)](p0, out, D, part, rows, splits, SPLITS_P2=triton.next_power_of_2(splits))
            return out
        if block_d < 4096:
            per = 4096 // block_d
            _kf_rows_resident[(triton.cdiv(rows, per),)](p0, out, D, rows, ROWS=per, BLOCK_D=block_d, num_warps=max(1, min(16, 4096 // 256)))
            return out
        if block_d <= 16384:
            _kf_row_resident[(rows,)](p0, out, D, BLOCK_D=block_d, num_warps=max(max(1, min(16, block_d // 256)), min(32, block_d // 1024)))
        else:
            _kf_row_looped[(rows,)](p0, out, D, BLOCK_D=16384, num_warps=16)
        return out
