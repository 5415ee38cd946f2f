"""The ceilings of this machine's GPU, measured once per (GPU model, driver) and cached.

`measure()` on CUDA, each rate the best of REPEATS timed runs after a warm-up (CUDA events):
- dram: the faster of a device-to-device copy of COPY_BYTES, or an eighth of the GPU's memory if less (read +
  written), and a row-sum that reads as many bytes (a read-only stream can run a few percent faster than a copy,
  so a copy-only ceiling would give reductions SOL fractions above 1);
- bf16 and fp16 tensor cores, and TF32: an N x N x N matmul through cuBLAS (TF32 allowed only for its own run);
- fp32 on the CUDA cores: a Triton kernel of FMA_CHAINS independent multiply-add chains per element, no memory
  traffic in the loop (2 FLOP per multiply-add);
- launch overhead: LAUNCHES back-to-back launches of a one-element add, timed together, per launch.
`for_gpu` reads the cache ($KERNELFLOW_CACHE, default ~/.cache/kernelflow, file peaks/<gpu>--<driver>.json) or
measures and writes it; `peaks_for` prefers a cached measurement of the named GPU to the table's. A
measurement that fails keeps the table's numbers and says why in `source`, so no SOL claim hides it.

Checked on CPU (tests/stages/measure/test_ceilings.py): caching, keying and the lookup order, with a stand-in measurement. The
measured ceilings of the target GPU: bench/ceilings.json (docs/LOG.md).
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelflow.stages.measure.peaks import KNOWN_PEAKS, Peaks

COPY_BYTES = 4 << 30
N = 8192
REPEATS = 10
FMA_CHAINS, FMA_ITERS, FMA_BLOCK = 4, 4096, 1024
LAUNCHES = 2000


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELFLOW_CACHE") or Path.home() / ".cache" / "kernelflow") / "peaks"


def cache_file(gpu: str, driver: str) -> Path:
    return cache_dir() / (re.sub(r"[^A-Za-z0-9._-]+", "_", f"{gpu}--{driver}") + ".json")


def cached(gpu: str) -> Peaks | None:
    """The newest cached measurement of the GPU model named `gpu` (any driver), or None."""
    files = sorted(cache_dir().glob(re.sub(r"[^A-Za-z0-9._-]+", "_", gpu) + "--*.json"),
                   key=lambda p: p.stat().st_mtime)
    return Peaks.model_validate_json(files[-1].read_text()) if files else None


def peaks_for(device_name: str) -> Peaks | None:
    """The ceilings of the GPU named `device_name`: measured here if cached, else the table's, else None."""
    return cached(device_name.strip()) or KNOWN_PEAKS.get(device_name.strip())


def for_gpu(gpu: str, driver: str, measure_fn: Callable[[], Peaks]) -> Peaks:
    """The cached ceilings of (gpu, driver), else `measure_fn()` written to the cache."""
    path = cache_file(gpu, driver)
    if path.exists():
        return Peaks.model_validate_json(path.read_text())
    peaks = measure_fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(peaks.model_dump_json(indent=1))
    os.replace(tmp, path)
    return peaks


def for_this_gpu() -> Peaks:
    """This CUDA device's ceilings, measured on first use (see the module doc)."""
    from kernelflow.stages.measure.provenance import collect

    return for_gpu(torch.cuda.get_device_name(), collect("cuda").driver or "unknown-driver", measure)


def _best_ms(fn: Callable[[], object]) -> float:
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPEATS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return min(times)


def _copy_rate(nbytes: int) -> float:
    src = torch.empty(nbytes // 4, device="cuda")
    dst = torch.empty_like(src)
    return 2 * nbytes / (_best_ms(lambda: dst.copy_(src)) * 1e-3)


def _read_rate(nbytes: int) -> float:
    src = torch.ones(nbytes // 4, device="cuda").view(-1, 8192)
    return nbytes / (_best_ms(lambda: src.sum(dim=1)) * 1e-3)


def _matmul_flops(dtype: torch.dtype, tf32: bool) -> float:
    a, b = (torch.randn(N, N, device="cuda", dtype=dtype) for _ in range(2))
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    try:
        return 2 * N**3 / (_best_ms(lambda: a @ b) * 1e-3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def _fp32_fma_flops() -> float:
    import triton
    import triton.language as tl

    @triton.jit
    def fma_chains(out_ptr, ITERS: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        a = offs.to(tl.float32) * 1e-9
        b, c, d = a + 1.0, a + 2.0, a + 3.0
        for _ in range(ITERS):
            a = a * 0.9999 + 0.0001
            b = b * 0.9999 + 0.0001
            c = c * 0.9999 + 0.0001
            d = d * 0.9999 + 0.0001
        tl.store(out_ptr + offs, a + b + c + d)

    grid = torch.cuda.get_device_properties(0).multi_processor_count * 16
    out = torch.empty(grid * FMA_BLOCK, device="cuda")
    ms = _best_ms(lambda: fma_chains[(grid,)](out, ITERS=FMA_ITERS, BLOCK=FMA_BLOCK, num_warps=4))
    return 2 * FMA_CHAINS * FMA_ITERS * grid * FMA_BLOCK / (ms * 1e-3)


def _launch_us() -> float:
    x = torch.zeros(1, device="cuda")
    x.add_(1)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(LAUNCHES):
        x.add_(1)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / LAUNCHES


def measure() -> Peaks:
    """Measure every ceiling on the current CUDA device; a failure keeps the table's value and says why."""
    gpu, when = torch.cuda.get_device_name(), time.strftime("%Y-%m-%d")
    table = KNOWN_PEAKS.get(gpu)
    values: dict[str, float] = {}
    notes: list[str] = []

    def take(field: str, how: str, fn: Callable[[], float]) -> None:
        try:
            values[field] = fn()
            notes.append(f"{field}: measured {when}, {how}")
        except Exception as e:  # recorded, never hidden: the table's value stays and the reason is kept
            if table is None:
                raise RuntimeError(f"measuring {field} on {gpu} failed and no table value exists: {e}") from e
            values[field] = getattr(table, field)
            notes.append(f"{field}: table value (measurement failed: {type(e).__name__}: {str(e)[:120]})")

    copy_bytes = min(COPY_BYTES, torch.cuda.get_device_properties(0).total_memory // 8)
    rates: dict[str, float] = {}
    take("dram_bytes_per_s", f"{copy_bytes / 2**30:.1f} GiB, the faster of a device-to-device copy and a row-sum "
         "(see rates below)", lambda: max(rates.setdefault("copy", _copy_rate(copy_bytes)),
                                          rates.setdefault("read", _read_rate(copy_bytes))))
    notes += [f"dram {how}: {rate / 1e12:.2f} TB/s" for how, rate in rates.items()]
    take("bf16_tensor_flops_per_s", f"{N}^3 bf16 matmul (cuBLAS)", lambda: _matmul_flops(torch.bfloat16, False))
    take("fp16_tensor_flops_per_s", f"{N}^3 fp16 matmul (cuBLAS)", lambda: _matmul_flops(torch.float16, False))
    take("tf32_flops_per_s", f"{N}^3 fp32 matmul with TF32 (cuBLAS)", lambda: _matmul_flops(torch.float32, True))
    take("fp32_flops_per_s", f"Triton, {FMA_CHAINS} independent FMA chains per element", _fp32_fma_flops)
    take("launch_overhead_us", f"{LAUNCHES} back-to-back one-element adds", _launch_us)
    torch.cuda.empty_cache()
    return Peaks(**values, source=f"{gpu}: " + "; ".join(notes))


if __name__ == "__main__":
    print(json.dumps(for_this_gpu().model_dump(), indent=1))
