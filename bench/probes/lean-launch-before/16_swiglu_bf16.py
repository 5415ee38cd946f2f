import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_epilogue(y0, y1, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc0 = tl.load(y0 + offs, mask=mask, other=0.0).to(tl.float32)
    acc1 = tl.load(y1 + offs, mask=mask, other=0.0).to(tl.float32)
    v0 = acc0
    v1 = v0 * tl.sigmoid(v0)
    v2 = acc1
    v3 = v1 * v2
    tl.store(out + offs, v3.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self, hidden_dim, ffn_dim):
        super().__init__()
        self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False, dtype=torch.bfloat16)
        self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False, dtype=torch.bfloat16)

    def forward(self, x):
        return F.silu(self.w1(x)) * self.w3(x)

class ModelNew(_Reference):
    def forward(self, x):
        y0 = torch.mm(x, self.w1.weight.t())
        y1 = torch.mm(x, self.w3.weight.t())
        out = torch.empty(y0.shape, device=y0.device, dtype=torch.bfloat16)
        n = y0.numel()
        _kf_epilogue[(triton.cdiv(n, 2048),)](y0, y1, out, n, BLOCK=2048, num_warps=4)
        return out
