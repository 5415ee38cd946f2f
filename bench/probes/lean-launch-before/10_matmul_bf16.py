import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _kf_matmul(a, b0, out, M, N, K, stride_am, stride_ak, stride_b0k, stride_b0n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, UPCAST: tl.constexpr, INTERPRETED: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mask_m = rm < M
    mask_n = rn < N
    a_ptrs = a + rm[:, None] * stride_am + rk[None, :] * stride_ak
    b0_ptrs = b0 + rk[:, None] * stride_b0k + rn[None, :] * stride_b0n
    acc0 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if INTERPRETED:
        k = 0
        while k < K:
            mask_k = rk < K - k
            tile_a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            if UPCAST:
                tile_a = tile_a.to(tl.float32)
            tile_b0 = tl.load(b0_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            if UPCAST:
                tile_b0 = tile_b0.to(tl.float32)
            acc0 = tl.dot(tile_a, tile_b0, acc0)
            b0_ptrs += BLOCK_K * stride_b0k
            a_ptrs += BLOCK_K * stride_ak
            k += BLOCK_K
    else:
        for k in range(0, K, BLOCK_K):
            mask_k = rk < K - k
            tile_a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            if UPCAST:
                tile_a = tile_a.to(tl.float32)
            tile_b0 = tl.load(b0_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            if UPCAST:
                tile_b0 = tile_b0.to(tl.float32)
            acc0 = tl.dot(tile_a, tile_b0, acc0)
            b0_ptrs += BLOCK_K * stride_b0k
            a_ptrs += BLOCK_K * stride_ak
    mask = mask_m[:, None] & mask_n[None, :]
    offs = rm[:, None] * N + rn[None, :]
    v0 = acc0
    tl.store(out + offs, v0.to(out.dtype.element_ty), mask=mask)


class _Reference(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return torch.matmul(a, b)

class ModelNew(_Reference):
    def forward(self, a, b):
        b0 = b
        M, K, N = a.shape[0], a.shape[1], b0.shape[1]
        out = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
        _kf_matmul[(triton.cdiv(M, 128) * triton.cdiv(N, 256),)](a, b0, out, M, N, K, a.stride(0), a.stride(1), b0.stride(0), b0.stride(1), BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, UPCAST=a.device.type == "cpu", INTERPRETED=a.device.type == "cpu", num_warps=8, num_stages=3)
        return out
