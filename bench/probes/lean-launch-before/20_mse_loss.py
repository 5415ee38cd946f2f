import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_loss_partial(p0, p1, part, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * BLOCK
    step = tl.num_programs(0) * BLOCK
    acc0 = tl.zeros([BLOCK], dtype=tl.float32)
    while start + BLOCK <= n:  # whole blocks: a constant mask, so loads vectorize whatever n is
        offs = start + tl.arange(0, BLOCK)
        mask = tl.full([BLOCK], 1, tl.int1)
        v0 = tl.load(p0 + offs, mask=mask, other=0.0).to(tl.float32)
        v1 = tl.load(p1 + offs, mask=mask, other=0.0).to(tl.float32)
        v2 = v0 - v1
        v3 = v2 * v2
        acc0 += tl.where(mask, v3, 0.0)
        start += step
    if start < n:  # the ragged last block, in one program
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        v0 = tl.load(p0 + offs, mask=mask, other=0.0).to(tl.float32)
        v1 = tl.load(p1 + offs, mask=mask, other=0.0).to(tl.float32)
        v2 = v0 - v1
        v3 = v2 * v2
        acc0 += tl.where(mask, v3, 0.0)
    tl.store(part + 0 * tl.num_programs(0) + pid, tl.sum(acc0, axis=0))


@triton.jit
def _kf_loss_combine(part, out, n, P, P2: tl.constexpr):
    i = tl.arange(0, P2)
    live = i < P
    v4 = tl.sum(tl.load(part + 0 * P + i, mask=live, other=0.0), axis=0)
    v5 = v4 / n
    tl.store(out, v5.to(out.dtype.element_ty))


class _Reference(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions, targets):
        return F.mse_loss(predictions, targets)

class ModelNew(_Reference):
    def forward(self, predictions, targets):
        p0 = predictions.contiguous()
        p1 = targets.contiguous()
        out = torch.empty((), device=p0.device, dtype=torch.float32)
        n = p0.numel()
        programs = max(1, min(triton.cdiv(n, 4096), 2048))
        part = torch.empty((1, programs), device=p0.device, dtype=torch.float32)
        _kf_loss_partial[(programs,)](p0, p1, part, n, BLOCK=4096, num_warps=8)
        _kf_loss_combine[(1,)](part, out, n, programs, P2=triton.next_power_of_2(programs), num_warps=4)
        return out
