import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_elementwise(p0, out, n, start, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offs = start + tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        mask = tl.full([BLOCK], 1, tl.int1)
    else:
        mask = offs < n
    v0 = tl.load(p0 + offs, mask=mask, other=0.0).to(tl.float32)
    v1 = tl.sigmoid(v0)
    v2 = v0 * v1
    tl.store(out + offs, v2.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x * torch.sigmoid(x)

class ModelNew(_Reference):
    def forward(self, x):
        p0 = x.contiguous()
        out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
        n = p0.numel()
        full = n // 1024
        if full:
            _kf_elementwise[(full,)](p0, out, n, 0, BLOCK=1024, EVEN=True, num_warps=8)
        if n % 1024:
            _kf_elementwise[(1,)](p0, out, n, full * 1024, BLOCK=1024, EVEN=False, num_warps=8)
        return out
