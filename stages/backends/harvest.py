"""Turn compiled GPU binaries into what a compile makes: PTX, cubin and SASS files plus one KernelBinary row per
kernel.

The compile backends use it for binaries built ahead of time on a CPU worker; a GPU worker uses
`harvest_triton` after a Triton candidate ran, to keep the kernels Triton compiled at first launch.
Resource numbers come from ptxas's own report (`-v`), so the two paths give the same rows.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

from kernelflow.stages.backends.sass import sass_stats
from kernelflow.stages.contracts import KernelBinary, StageRequest


def _triton_bin() -> Path | None:
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "backends" / "nvidia" / "bin"


def find_tool(name: str) -> str | None:
    """A CUDA tool: the toolkit's (CUDA_HOME, /usr/local/cuda), then the PATH, then the copy in Triton's wheel."""
    homes = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for home in filter(None, homes):
        if (path := Path(home) / "bin" / name).is_file():
            return str(path)
    if found := shutil.which(name):
        return found
    bundled = _triton_bin()
    if bundled is not None and (bundled / name).is_file():
        return str(bundled / name)
    return None


_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PROPS = re.compile(r"Function properties for (\S+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")


def parse_ptxas(log: str) -> list[KernelBinary]:
    """One row per entry function in a `ptxas -v` report (device functions are folded into their callers)."""
    rows: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current = rows.setdefault(m.group(1), {"name": m.group(1)})
        elif m := _PROPS.search(line):
            current = rows.get(m.group(1))
        elif current is not None and (m := _FRAME.search(line)):
            current.update(stack_bytes=int(m[1]), spill_stores_bytes=int(m[2]), spill_loads_bytes=int(m[3]))
        elif current is not None and (m := _USED.search(line)):
            current["registers"] = int(m[1])
            smem = _SMEM.search(line)
            current["shared_bytes"] = int(smem[1]) if smem else 0
    return [KernelBinary(**row) for row in rows.values()]


def sass(cubin: bytes) -> str | None:
    """SASS of a cubin by `cuobjdump -sass`; None where no cuobjdump is found or it fails."""
    tool = find_tool("cuobjdump")
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 and proc.stdout.strip() else None


def put_binaries(req: StageRequest, files: dict[str, str], key: str, ptx: str | None, cubin: bytes | None) -> str | None:
    """Write ptx:<key>, cubin:<key> and sass:<key> (when cuobjdump can read the cubin) under binaries/ of the work dir,
    named in `files`; returns the SASS text."""
    text, stem = None, "binaries/" + re.sub(r"[^\w.-]", "_", key)
    if ptx:
        files[f"ptx:{key}"] = req.write(f"{stem}.ptx", ptx)
    if cubin:
        files[f"cubin:{key}"] = req.write(f"{stem}.cubin", cubin)
        if (text := sass(cubin)) is not None:
            files[f"sass:{key}"] = req.write(f"{stem}.sass", text)
    return text


def with_sass(rows: list[KernelBinary], text: str | None, name: str | None = None) -> list[KernelBinary]:
    """Rows with their static SASS statistics, matched by kernel name (or by `name` for every row)."""
    stats = sass_stats(text) if text else {}
    return [row.model_copy(update={"sass": stats[key].model_dump()}) if (key := name or row.name) in stats else row
            for row in rows]


# --- Triton -------------------------------------------------------------------------------------------------


def triton_kernels(module: ModuleType) -> dict[str, Any]:
    """The module's @triton.jit functions by name, unwrapping @triton.autotune / @triton.heuristics."""
    from triton.runtime.jit import JITFunction

    found: dict[str, Any] = {}
    for value in vars(module).values():
        fn = value
        while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
            fn = fn.fn
        if isinstance(fn, JITFunction):
            found[fn.fn.__name__] = fn
    return found


def compiled_variants(fn: Any) -> list[Any]:
    """CompiledKernel objects in a JITFunction's per-device caches (read without creating a cache)."""
    out = []
    for kernel_cache, *_ in fn.device_caches.values():
        for kernel in kernel_cache.values():
            out.append(kernel.result() if hasattr(kernel, "result") else kernel)
    return out


def _ptxas_report(kernel: Any) -> KernelBinary | None:
    """Re-run ptxas -v on the kernel's PTX with the flags Triton used (its own log is discarded)."""
    from triton.backends.nvidia.compiler import get_ptxas, sm_arch_from_capability

    md = kernel.metadata
    ptxas = get_ptxas(md.target.arch).path
    fmad = [] if md.enable_fp_fusion else ["--fmad=false"]
    extra = md.ptx_options.split(" ") if md.ptx_options else []
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        src.write_text(kernel.asm["ptx"])
        cmd = [ptxas, "-lineinfo", *fmad, "-v", *extra, f"--gpu-name={sm_arch_from_capability(md.target.arch)}",
               str(src), "-o", str(Path(tmp) / "k.cubin")]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    rows = parse_ptxas(proc.stdout + proc.stderr) if proc.returncode == 0 else []
    return rows[0] if len(rows) == 1 else None


def triton_row(key: str, kernel: Any, req: StageRequest, files: dict[str, str]) -> KernelBinary:
    """Files and a row for one CompiledKernel. shared_bytes is Triton's (dynamic) shared memory per block."""
    text = put_binaries(req, files, key, kernel.asm.get("ptx"), kernel.asm.get("cubin"))
    try:
        report = _ptxas_report(kernel)
    except Exception:  # no ptxas here: fall back to what the driver reported at load, if it loaded
        report = None
    row = report or KernelBinary(name=key, registers=getattr(kernel, "n_regs", None))
    row = row.model_copy(update={"name": key, "shared_bytes": kernel.metadata.shared})
    return with_sass([row], text, kernel.metadata.name)[0]


def harvest_triton(module: ModuleType, req: StageRequest) -> tuple[list[KernelBinary], dict[str, str]]:
    """Every kernel Triton compiled for this module's @triton.jit functions: rows and files (ptx/cubin/sass:<name>).

    A function compiled for several specializations gives name, name.1, name.2, ...
    """
    rows: list[KernelBinary] = []
    files: dict[str, str] = {}
    for name, fn in triton_kernels(module).items():
        for i, kernel in enumerate(compiled_variants(fn)):
            rows.append(triton_row(name if i == 0 else f"{name}.{i}", kernel, req, files))
    return rows, files
