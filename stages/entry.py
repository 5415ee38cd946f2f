"""`python -m stages.<name> REQUEST.json RESULT.json`: the same stage code, in its own process."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

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
    request = request_cls.model_validate_json(Path(sys.argv[1]).read_text())
    try:
        result = run(request)
    except KernelflowError as e:  # not the candidate's fault: the executor raises it as such
        print(f"kernelflow-infrastructure-error: {e}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(INFRA_EXIT)
    write_atomic(sys.argv[2], result.model_dump_json())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks or CUDA teardown must not alter the verdict
