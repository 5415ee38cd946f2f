"""Compile stage: check a candidate and build its GPU binaries on a CPU worker (no GPU needed).

`run(req)` picks the backend by name (kernelflow.stages.backends) and returns a CompileResult: PTX, cubin and SASS as files,
registers / shared memory / spills per kernel, toolchain versions. A candidate's fault is a failed result,
never an exception.

Candidate code (its import, and for Triton one forward pass with launches intercepted) runs only in a process
dedicated to one compile, `python -m kernelflow.stages.compile REQUEST.json RESULT.json`: there a backend may unset
TRITON_INTERPRET, install a stand-in Triton driver for the target and replace load_inline, restoring nothing, so the
outcome never depends on a caller's state and a crash or hang costs only that process. `run` refuses any other
process; the executor (stages/executors/run.py) always gives a compile its own. Before anything is imported, the
source passes the static checks (stages/harness/static_checks.py): a hit fails the candidate as `cheat`.
"""

from __future__ import annotations

import sys
import time

from kernelflow.stages.backends import backend, result
from kernelflow.stages.contracts import CompileRequest, CompileResult
from kernelflow.stages.errors import CandidateFault, InfrastructureError
from kernelflow.stages.harness import static_checks

Result = CompileResult


def failed(req: CompileRequest, kind: str, message: str, files: dict[str, str] | None = None) -> CompileResult:
    return result(req, status="failed", failure_kind=kind, message=message, files=dict(files or {}))


def _dedicated_process() -> bool:
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec is not None and spec.name == "kernelflow.stages.compile"


def run(req: CompileRequest) -> CompileResult:
    started = time.perf_counter()
    if not _dedicated_process():
        raise InfrastructureError("the compile stage runs only in a process of its own (python -m "
                                  "kernelflow.stages.compile, as run_stage('compile', ...) starts it)")
    try:
        static_checks.check_source(req.candidate.source, req.problem)
        res = backend(req.candidate.backend).compile(req)
    except CandidateFault as e:
        res = failed(req, e.kind, e.message)
    res.duration_s = time.perf_counter() - started
    return res


if __name__ == "__main__":
    from kernelflow.stages.entry import stage_main

    stage_main(CompileRequest, run)
