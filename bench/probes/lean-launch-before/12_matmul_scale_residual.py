import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_epilogue(y0, p0, out, n, s0, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc0 = tl.load(y0 + offs, mask=mask, other=0.0).to(tl.float32)
    v0 = acc0
    v1 = v0 * s0
    v2 = tl.load(p0 + offs, mask=mask, other=0.0).to(tl.float32)
    v3 = v1 + v2
    tl.store(out + offs, v3.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, a, b, residual):
        return torch.matmul(a, b) * self.scale + residual

class ModelNew(_Reference):
    def forward(self, a, b, residual):
        y0 = torch.mm(a, b)
        p0 = residual.contiguous()
        out = torch.empty(y0.shape, device=y0.device, dtype=torch.float32)
        n = y0.numel()
        _kf_epilogue[(triton.cdiv(n, 1024),)](y0, p0, out, n, self.scale, BLOCK=1024, num_warps=4)
        return out
