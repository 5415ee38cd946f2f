import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_epilogue(y0, out, n, s0, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    acc0 = tl.load(y0 + offs, mask=mask, other=0.0).to(tl.float32)
    v0 = acc0
    v1 = tl.maximum(v0, 0.0)
    v2 = v1 * s0
    tl.store(out + offs, v2.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, multiplier):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2, bias=True)
        self.multiplier = multiplier

    def forward(self, x):
        return torch.relu(self.conv(x)) * self.multiplier

class ModelNew(_Reference):
    def forward(self, x):
        y0 = F.conv2d(x, self.conv.weight, self.conv.bias, self.conv.stride, self.conv.padding, self.conv.dilation, self.conv.groups).contiguous()
        out = torch.empty(y0.shape, device=y0.device, dtype=torch.float32)
        n = y0.numel()
        _kf_epilogue[(triton.cdiv(n, 2048),)](y0, out, n, self.multiplier, BLOCK=2048, num_warps=4)
        return out
