"""Where the CUTLASS/CuTe C++ headers are, for load_inline's extra_include_paths and the cute compile backend.

Light on purpose (no torch, no cutlass import: find_spec does not run the package): a cute candidate calls
`include_dirs()` when it is imported, on the compile worker and on the GPU worker alike, and the cute backend
(stages/backends/cute.py) calls the same function, so both build against the same headers.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

MISSING = "CUTLASS/CuTe headers not found: pip install nvidia-cutlass (or set CUTLASS_PATH to a CUTLASS checkout)"


def include_dirs() -> list[str]:
    """[include dir holding cute/ and cutlass/]: $CUTLASS_PATH/include if set, else the nvidia-cutlass wheel's
    cutlass_library/source/include. Raises FileNotFoundError (MISSING) when neither has cute/tensor.hpp."""
    roots = [Path(os.environ["CUTLASS_PATH"]) / "include"] if os.environ.get("CUTLASS_PATH") else []
    spec = importlib.util.find_spec("cutlass_library")
    roots += [Path(p) / "source" / "include" for p in (spec.submodule_search_locations or [])] if spec else []
    for root in roots:
        if (root / "cute" / "tensor.hpp").is_file():
            return [str(root)]
    raise FileNotFoundError(MISSING)


def version() -> str | None:
    """The CUTLASS release of the headers include_dirs() finds (cutlass/version.h), with where they are; None
    without headers."""
    try:
        [root] = include_dirs()
    except FileNotFoundError:
        return None
    text = (Path(root) / "cutlass" / "version.h").read_text(errors="replace") \
        if (Path(root) / "cutlass" / "version.h").is_file() else ""
    parts = [re.search(rf"#define CUTLASS_{p}\s+(\d+)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    release = ".".join(m.group(1) for m in parts if m) if all(parts) else "unknown release"
    return f"{release} ({root})"
