"""One benchmark at a time per GPU. Embedded mode: an exclusive file lock per GPU under the store.

At scale the same guarantee comes from Prefect itself (one work queue per GPU with concurrency 1, or
`concurrency("gpu-N", occupy=1, strict=True)`); see docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import fcntl
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def gpu_lock(store_root: Path, device: str, index: int = 0) -> Iterator[None]:
    if device != "cuda":
        yield
        return
    path = store_root / "locks" / f"gpu-{index}.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
