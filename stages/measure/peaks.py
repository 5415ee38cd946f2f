"""Machine ceilings for the roofline: the peak rates a kernel cannot beat, per GPU name.

`ceilings.peaks_for` looks a GPU up by the name CUDA reports (`torch.cuda.get_device_name()`): a measurement of that
GPU cached on this machine (stages/measure/ceilings.py) wins, else this table, else None (a CPU, an unknown GPU): no
SOL claim is made there.
"""

from __future__ import annotations

from pydantic import Field

from kernelflow.stages.contracts import Contract

TARGET_GPU = "NVIDIA H200"  # the GPU we optimize for: analytic floors and advice on a machine without a GPU are its


class Peaks(Contract):
    """Peak rates of one GPU model; every number says in `source` where it comes from."""

    dram_bytes_per_s: float = Field(gt=0, description="DRAM (HBM) bandwidth, bytes per second")
    fp32_flops_per_s: float = Field(gt=0, description="fp32 FLOP/s on CUDA cores (no tensor cores); also used "
                                    "for pointwise work in every dtype")
    tf32_flops_per_s: float = Field(gt=0, description="dense TF32 tensor-core FLOP/s (fp32 matmul/conv when TF32 is allowed)")
    bf16_tensor_flops_per_s: float = Field(gt=0, description="dense bf16 tensor-core FLOP/s")
    fp16_tensor_flops_per_s: float = Field(gt=0, description="dense fp16 tensor-core FLOP/s")
    launch_overhead_us: float = Field(gt=0, description="cost of one kernel launch as seen by the timer, microseconds")
    source: str = Field(description="where each number comes from (measured how and when, or datasheet)")


KNOWN_PEAKS: dict[str, Peaks] = {
    "NVIDIA H200": Peaks(
        dram_bytes_per_s=4.3e12,
        fp32_flops_per_s=6.7e13,
        tf32_flops_per_s=4.95e14,
        bf16_tensor_flops_per_s=7.88e14,
        fp16_tensor_flops_per_s=7.88e14,
        launch_overhead_us=5.0,
        source=(
            "dram: measured, device-to-device copy on this workplace's H200, 2026-10-28 (8.6 GB in 2.0 ms; "
            "datasheet 4.8 TB/s); bf16: measured, 8192^3 bf16 matmul through PyTorch on random data, same day "
            "(datasheet dense 989 TFLOP/s); fp16: taken equal to bf16 (not measured); fp32 (67 TFLOP/s) and "
            "tf32 dense (495 TFLOP/s): datasheet, not measured; launch overhead ~5 us: the lead's estimate"
        ),
    ),
}

