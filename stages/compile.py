"""Compile stage: check a candidate and build its GPU binaries on a CPU worker (no GPU needed).

`run(req)` picks the backend by name (stages.backends) and returns a CompileResult: PTX, cubin and SASS as blobs,
registers / shared memory / spills per kernel, toolchain versions. A candidate's fault is a failed result,
never an exception.

Design: candidate code (its import, and for Triton one forward pass with launches intercepted) runs only in a
process dedicated to one compile, `python -m stages.compile REQUEST.json RESULT.json`. There a backend may
unset TRITON_INTERPRET, install a stand-in Triton driver for the target and replace load_inline, restoring
nothing. Called anywhere else (a test, an inline executor, a process that already imported Triton in interpreter
mode), `run` hands the request to that subprocess through stages.executor, so the outcome never depends on the
caller's state, and a crash or hang costs only the child. Before anything is imported, the source passes the static
checks (stages/static_checks.py): a hit fails the candidate as `cheat`.
"""

from __future__ import annotations

import sys
import time

from stages import static_checks
from stages.backends import backend, result
from stages.contracts import CompileRequest, CompileResult
from stages.errors import CandidateFault

Result = CompileResult


def failed(req: CompileRequest, kind: str, message: str, blobs: dict[str, str] | None = None) -> CompileResult:
    return result(req, status="failed", failure_kind=kind, message=message, blobs=dict(blobs or {}))


def _dedicated_process() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "stages.compile"


def run(req: CompileRequest) -> CompileResult:
    started = time.perf_counter()
    if not _dedicated_process():
        from stages.executor import run_stage

        res = run_stage("compile", req, "subprocess")
    else:
        try:
            static_checks.check(req.candidate.source, req.problem)
            res = backend(req.candidate.backend).compile(req)
        except CandidateFault as e:
            res = failed(req, e.kind, e.message)
    res.duration_s = time.perf_counter() - started
    return res  # type: ignore[return-value]


if __name__ == "__main__":
    from stages.entry import main

    main(CompileRequest, run)
