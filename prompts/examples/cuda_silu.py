"""SiLU for problems/09_silu.py as a CUDA C++ extension (KernelBench style, built by load_inline).

A runnable example of the cuda backend: float4 loads and stores when the row pointer is 16-byte aligned,
a scalar tail otherwise; sigmoid via __expf, computed as x / (1 + exp(-x)) which stays finite for large |x|.
"""

import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <cuda_runtime.h>

__device__ __forceinline__ float silu(float x) { return x / (1.0f + __expf(-x)); }

__global__ void silu_vec4(const float4* __restrict__ x, float4* __restrict__ y, int64_t n4) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (int64_t)gridDim.x * blockDim.x) {
        float4 v = x[i];
        y[i] = make_float4(silu(v.x), silu(v.y), silu(v.z), silu(v.w));
    }
}

__global__ void silu_tail(const float* __restrict__ x, float* __restrict__ y, int64_t start, int64_t n) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = silu(x[i]);
}

torch::Tensor silu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous fp32 CUDA input");
    auto y = torch::empty_like(x);
    const bool aligned = reinterpret_cast<uintptr_t>(x.data_ptr()) % 16 == 0
                         && reinterpret_cast<uintptr_t>(y.data_ptr()) % 16 == 0;
    const int64_t n = x.numel(), n4 = aligned ? n / 4 : 0;
    const int threads = 256;
    if (n4 > 0) {
        int64_t blocks = (n4 + threads - 1) / threads;
        if (blocks > 132 * 16) blocks = 132 * 16;
        silu_vec4<<<blocks, threads>>>(reinterpret_cast<const float4*>(x.data_ptr<float>()),
                                       reinterpret_cast<float4*>(y.data_ptr<float>()), n4);
    }
    if (n - 4 * n4 > 0) {
        silu_tail<<<1, threads>>>(x.data_ptr<float>(), y.data_ptr<float>(), 4 * n4, n);
    }
    return y;
}
"""

silu_ext = load_inline(
    name="kf_example_silu",
    cpp_sources="torch::Tensor silu_cuda(torch::Tensor x);",
    cuda_sources=cuda_source,
    functions=["silu_cuda"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return silu_ext.silu_cuda(x.contiguous())
