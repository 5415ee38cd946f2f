"""`python -m stages.<name> REQUEST.json RESULT.json`: the same stage code, in its own process.

The process ends by os._exit, without the interpreter's teardown, whatever happens: code the candidate left behind
(an atexit hook, a finalizer) never runs after the stage, so it can neither write a result nor alter one. What the
process is doing is kept in its phase file (stages/phase.py) for the executor, should it end without a result.
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from kernelflow.stages import phase
from kernelflow.stages.errors import KernelflowError

INFRA_EXIT = 3  # exit status of a stage process that met a fault that is not the candidate's


def write_atomic(path: str | Path, text: str) -> None:
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def stage_main(request_cls: type[BaseModel], run: Callable) -> None:
    if len(sys.argv) != 3:
        sys.exit(f"usage: python -m stages.<stage> REQUEST.json RESULT.json (got {sys.argv[1:]})")
    phase.record(sys.argv[2])
    request = request_cls.model_validate_json(Path(sys.argv[1]).read_text())
    try:
        result = run(request)
    except KernelflowError as e:  # not the candidate's fault: the executor raises it as such
        print(f"kernelflow-infrastructure-error: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(INFRA_EXIT)
    except BaseException:  # a SystemExit from candidate code, or an error the stage did not expect: no result
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
    write_atomic(sys.argv[2], result.model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks or CUDA teardown must not alter the verdict
