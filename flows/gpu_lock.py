"""One benchmark or profile at a time per GPU. Embedded mode: an exclusive file lock per physical GPU under the
store, named by the GPU's UUID, so workers pinned to different GPUs (CUDA_VISIBLE_DEVICES: each sees "device 0")
run side by side and two workers on one GPU take turns.

At scale the same guarantee comes from Prefect itself (one work queue per GPU with concurrency 1, or
`concurrency("gpu-N", occupy=1, strict=True)`); see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch


def gpu_key() -> str:
    """The current CUDA device's UUID (stable across processes and CUDA_VISIBLE_DEVICES), else its index."""
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return f"gpu-{uuid}" if uuid is not None else f"gpu-index-{index}"


@contextmanager
def gpu_lock(store_root: Path, device: str) -> Iterator[None]:
    """Hold the lock of this process's GPU for a call on `device`; a CPU call, or a cuda call where no GPU is visible
    (the stage then says so), holds none."""
    if device != "cuda" or not torch.cuda.is_available():
        yield
        return
    path = store_root / "locks" / f"{gpu_key()}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
