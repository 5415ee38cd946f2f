"""Turn a Candidate's source into an importable module and its ModelNew class; tell a user's source's backend."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from types import ModuleType

import torch

from kernelflow.stages.contracts import Backend, Candidate
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness import interpreter_compat
from kernelflow.stages.problems.kernelbench import import_file

CANDIDATE_MODULE_PREFIX = "kf_cand_"  # a candidate's file and module name: the prefix, then its id
GPU_ONLY: tuple[Backend, ...] = ("cuda", "cute")  # C++ extensions: built by load_inline, run only on a GPU


def backend_of(source: str) -> Backend:
    """The backend a user's source is written for: CuTe when an extension includes CuTe/CUTLASS headers, CUDA C++
    when it builds another extension, Triton when it uses Triton, else plain torch."""
    if "load_inline" in source or "cpp_extension" in source:
        return "cute" if "<cute/" in source or "<cutlass/" in source else "cuda"
    return "triton" if "triton" in source else "torch"


def write_source(candidate: Candidate, workdir: str | Path) -> Path:
    """Triton needs a real file to read kernel source from; the name is unique per candidate."""
    path = Path(workdir) / f"{CANDIDATE_MODULE_PREFIX}{candidate.id}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(candidate.source)
    return path


def import_candidate(candidate: Candidate, workdir: str | Path) -> ModuleType:
    """Import the candidate's module from a real file; a failure or a missing ModelNew is the candidate's fault."""
    path = write_source(candidate, workdir)
    try:
        module = import_file(path, path.stem)
    except Exception as e:
        raise CandidateFault("import_error", f"{type(e).__name__}: {e}") from e
    cls = getattr(module, "ModelNew", None)
    if not (inspect.isclass(cls) and issubclass(cls, torch.nn.Module)):
        raise CandidateFault("import_error", "the module defines no class ModelNew(nn.Module)")
    return module


def load_model_class(candidate: Candidate, workdir: str | Path, device: str) -> type[torch.nn.Module]:
    """The candidate's ModelNew, to run on `device`; a backend that cannot run there is an "unavailable" fault."""
    if candidate.backend in GPU_ONLY and device != "cuda":
        raise CandidateFault("unavailable", "CUDA C++ candidates run only on a GPU: use --device cuda")
    if candidate.backend == "triton" and os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available():
        raise CandidateFault("unavailable", "Triton needs a GPU, or TRITON_INTERPRET=1 to run on CPU")
    if candidate.backend == "triton" and os.environ.get("TRITON_INTERPRET") == "1":
        interpreter_compat.install()
    return import_candidate(candidate, workdir).ModelNew
