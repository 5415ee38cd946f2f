"""Row softmax for problems/01_softmax.py in Triton: a runnable few-shot example of the triton backend.

One program per row. A row that fits in one block (BLOCK >= D) is read once, kept in registers, and written
once. A longer row takes two passes over its blocks: an online max and rescaled sum, then the normalized store;
it reads the row twice. Masks handle D not a multiple of BLOCK; statistics are fp32.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

MAX_BLOCK = 16384


@triton.jit
def softmax_row(x_ptr, y_ptr, D, stride_x, stride_y, BLOCK: tl.constexpr, ONE_BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row, y_row = x_ptr + row * stride_x, y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if ONE_BLOCK:
        x = tl.load(x_row + cols, mask=cols < D, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, 0))
        tl.store(y_row + cols, (e / tl.sum(e, 0)).to(y_ptr.dtype.element_ty), mask=cols < D)
    else:
        m = tl.full([BLOCK], -float("inf"), tl.float32)  # per-lane running max and sum, merged at the end
        s = tl.zeros([BLOCK], tl.float32)
        start = 0  # `while`, not `for ... in range(0, D, BLOCK)`: Triton's CPU interpreter rejects a runtime bound
        while start < D:
            x = tl.load(x_row + start + cols, mask=start + cols < D, other=-float("inf")).to(tl.float32)
            m_new = tl.maximum(m, x)
            alpha = tl.where(m == m_new, 1.0, tl.exp(m - m_new))  # 1 also where both are still -inf
            s = s * alpha + tl.where(x == -float("inf"), 0.0, tl.exp(x - m_new))
            m = m_new
            start += BLOCK
        row_max = tl.max(m, 0)
        total = tl.sum(s * tl.exp(m - row_max), 0)
        start = 0
        while start < D:
            x = tl.load(x_row + start + cols, mask=start + cols < D, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, (tl.exp(x - row_max) / total).to(y_ptr.dtype.element_ty),
                     mask=start + cols < D)
            start += BLOCK


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, D = x.reshape(-1, x.shape[-1]).shape
        y = torch.empty_like(x)
        block = min(triton.next_power_of_2(D), MAX_BLOCK)
        softmax_row[(rows,)](x, y, D, D, D, BLOCK=block, ONE_BLOCK=block >= D, num_warps=8 if block >= 2048 else 4)
        return y
