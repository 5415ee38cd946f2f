"""CUDA candidates (KernelBench style: load_inline at import time), compiled here for inspection.

The candidate is imported with torch's load_inline/load replaced by a recorder that returns a stand-in module,
so its sources and flags are captured and nothing is built. Each captured .cu is compiled by nvcc for the
request's arch to a cubin (-keep leaves the PTX; -Xptxas -v reports registers, shared memory, spills and stack
per kernel) and disassembled by cuobjdump. The extension .so itself links against CUDA torch, so load_inline
builds it on the GPU worker; the binaries here are for inspection and for failing broken sources early.

Include paths: torch's own, Python's, headers of any nvidia-* wheels installed here (cublas, cusparse, ...),
and a shim for c10/cuda/impl/cuda_cmake_macros.h, the one generated header that torch's CPU wheel lacks.
A missing library header (CUTLASS/CuTe, CUB, Thrust, the CUDA libraries', torch's: LIBRARY_HEADERS) is this
machine's limit, not the candidate's fault: the build is left to the GPU worker. Any other missing header (a typo,
a file the candidate does not ship) is a compile error here.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
import shutil
import subprocess
import sysconfig
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from torch.utils import cpp_extension

from kernelflow.stages.backends import load_for_compile, result
from kernelflow.stages.backends.harvest import find_tool, parse_ptxas, put_binaries, with_sass
from kernelflow.stages.contracts import CompileRequest, CompileResult, KernelBinary
from kernelflow.stages.errors import CandidateFault

IMPLICIT_HEADERS = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"  # as load_inline adds
ARCH_FLAGS = ("-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code", "--gpu-code")
MACHINE_LIMITS = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "no CUDA GPUs", "CUDA driver")

LIBRARY_HEADERS = ("cute/", "cutlass/", "cub/", "thrust/", "cuda", "cublas", "cudnn", "cufft", "curand", "cusparse",
                   "cusolver", "nccl", "nvshmem", "mma.h", "torch/", "ATen/", "c10/")  # prefixes of header paths


class Extension(NamedTuple):
    name: str
    sources: list[tuple[str, str]]  # (file name, CUDA text)
    cuda_cflags: list[str]
    include_paths: list[str]


class NotBuiltHere:
    """Stands in for the extension module on the compile worker: calling anything on it raises."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)

        def call(*args, **kwargs):
            raise RuntimeError(f"extension {self._name!r} is built by load_inline on the GPU worker, not here")

        return call


def _capture(req: CompileRequest) -> tuple[list[Extension], str]:
    """Import the candidate with load_inline/load recording; returns the extensions and a note on the import."""
    captured: list[Extension] = []
    real_inline, real_load = cpp_extension.load_inline, cpp_extension.load

    def load_inline(*args, **kwargs):
        a = inspect.signature(real_inline).bind(*args, **kwargs).arguments
        srcs = a.get("cuda_sources") or []
        text = "\n".join([srcs] if isinstance(srcs, str) else srcs)
        if text and not a.get("no_implicit_headers"):
            text = IMPLICIT_HEADERS + text
        captured.append(Extension(a["name"], [("cuda.cu", text)] if text else [], list(a.get("extra_cuda_cflags") or []),
                                  list(a.get("extra_include_paths") or [])))
        return NotBuiltHere(a["name"])

    def load(*args, **kwargs):
        a = inspect.signature(real_load).bind(*args, **kwargs).arguments
        files = [a["sources"]] if isinstance(a["sources"], str) else list(a["sources"])
        try:
            cu = [(Path(f).name, Path(f).read_text()) for f in files if f.endswith(".cu")]
        except OSError as e:
            raise CandidateFault("import_error", f"load(): cannot read a source: {e}") from e
        captured.append(Extension(a["name"], cu, list(a.get("extra_cuda_cflags") or []),
                                  list(a.get("extra_include_paths") or [])))
        return NotBuiltHere(a["name"])

    cpp_extension.load_inline, cpp_extension.load = load_inline, load
    try:
        load_for_compile(req)
    except CandidateFault as e:  # a GPU-only call after the extension was defined is this machine's limit
        if captured and any(s in e.message for s in MACHINE_LIMITS):
            return captured, f"; the import stopped here at a GPU-only call ({e.message[:300]})"
        raise
    return captured, ""


def _include_paths(shim: Path) -> list[str]:
    paths = [*cpp_extension.include_paths(), sysconfig.get_paths()["include"]]
    spec = importlib.util.find_spec("nvidia")
    for root in (spec.submodule_search_locations or []) if spec else []:
        paths += sorted(str(p) for p in Path(root).glob("*/include"))
    if not (Path(paths[0]) / "c10/cuda/impl/cuda_cmake_macros.h").is_file():
        header = shim / "c10/cuda/impl/cuda_cmake_macros.h"
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
        paths.append(str(shim))
    return paths


def _candidate_flags(flags: list[str]) -> list[str]:
    """The candidate's extra_cuda_cflags without its arch choice (the request's arch decides)."""
    out: list[str] = []
    skip = False
    for flag in flags:
        if skip:
            skip = False
        elif flag in ARCH_FLAGS:
            skip = True
        elif not flag.startswith(tuple(f + "=" for f in ARCH_FLAGS)):
            out.append(flag)
    return out


def _nvcc(nvcc: str, req: CompileRequest, ext: Extension, file: str, text: str, build: Path,
          base_includes: list[str]) -> tuple[int, str]:
    src, keep = build / file, build / "keep"
    keep.mkdir(parents=True, exist_ok=True)
    src.write_text(text)
    includes = [f"-I{p}" for p in [*base_includes, *ext.include_paths]]
    cmd = [nvcc, "-cubin", f"-arch={req.arch}", "-std=c++17", "-Xptxas", "-v", "-keep", f"-keep-dir={keep}",
           f"-DTORCH_EXTENSION_NAME={ext.name}", "-DTORCH_API_INCLUDE_EXTENSION_H", *cpp_extension.COMMON_NVCC_FLAGS,
           *includes, *_candidate_flags(ext.cuda_cflags), "-o", str(src.with_suffix(".cubin")), str(src)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=build, timeout=req.timeout_s)
    except subprocess.TimeoutExpired as e:
        raise CandidateFault("timeout", f"nvcc ran past the {req.timeout_s:.0f} s deadline") from e
    return proc.returncode, f"$ {' '.join(cmd)}\n{proc.stdout}{proc.stderr}"


def compile(req: CompileRequest, include_dirs: Sequence[str] = (),
            library_headers: tuple[str, ...] = LIBRARY_HEADERS) -> CompileResult:
    """Build the candidate's CUDA sources; `include_dirs` go to every nvcc call (after torch's own), and a missing
    header that starts with one of `library_headers` leaves the build to the GPU worker."""
    nvcc = find_tool("nvcc")
    if nvcc is None:
        return result(req, status="failed", failure_kind="unavailable",
                      message="nvcc not found (CUDA_HOME, /usr/local/cuda, PATH): CUDA backend off")
    extensions, note = _capture(req)
    if not any(ext.sources for ext in extensions):
        raise CandidateFault("compile_error", "no load_inline/load call with CUDA sources found at import")
    base_includes = [*_include_paths(Path(req.workdir) / "nvcc" / "shim"), *include_dirs]  # once per compile
    rows: list[KernelBinary] = []
    files: dict[str, str] = {}
    logs: list[str] = []
    for ext in extensions:
        for file, text in ext.sources:
            key = ext.name if len(ext.sources) == 1 else f"{ext.name}/{file}"
            build = Path(req.workdir) / "nvcc" / key
            code, log = _nvcc(nvcc, req, ext, file, text, build, base_includes)
            logs.append(log)
            files[f"cu:{key}"] = (build / file).relative_to(req.workdir).as_posix()
            if code != 0:
                files["log"] = req.write("nvcc.log", "\n".join(logs))
                missing = re.findall(r"fatal error: ([^:\s]+): No such file or directory", log)
                if missing and all(m.startswith(library_headers) for m in missing):
                    return result(req, mode="on_gpu_worker", files=files, message=f"{key}: library header "
                                  f"{', '.join(missing)} missing on this machine; the extension is built by load_inline "
                                  "on the GPU worker" + note)
                errors = [line for line in log.splitlines() if "error" in line]
                raise_msg = f"nvcc failed on {key}: " + ("\n".join(errors[:10]) or log[-2000:])
                return result(req, status="failed", failure_kind="compile_error", message=raise_msg, files=files)
            ptx = next((build / "keep").glob("*.ptx"), None)
            sass_text = put_binaries(req, files, key, ptx.read_text() if ptx else None,
                                     (build / file).with_suffix(".cubin").read_bytes())
            shutil.rmtree(build / "keep")  # preprocessed intermediates: tens of MB
            rows += with_sass(parse_ptxas(log), sass_text)
    files["log"] = req.write("nvcc.log", "\n".join(logs))
    return result(req, mode="ahead_of_time", kernels=rows, files=files,
                  message=f"binaries for inspection built here for {req.arch}; the extension is built by load_inline "
                          f"on the GPU worker{note}")
