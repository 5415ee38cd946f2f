"""Where a stage runs: inline (trusted, cheap), in a subprocess with a deadline (anything running candidate code),
or in a container of its own (stages/docker_executor.py: no network, read-only root, limits, non-root user).

A candidate that crashes the process, calls os._exit, hangs or poisons the CUDA context only loses its own
process: the executor turns that into a failure result with the process log kept as a blob. A stage process
gets the environment without secrets (SECRET: API keys, tokens, cloud credentials); inline stages share the
flow's process, keys included: inline is for trusted code and tests.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Literal

from artifacts.blobs import put_bytes
from stages.contracts import StageRequest, StageResult
from stages.docker_executor import Docker, run_in_container
from stages.entry import INFRA_EXIT
from stages.errors import InfrastructureError

STAGES = {"compile": "stages.compile", "verify": "stages.verify", "benchmark": "stages.benchmark",
          "profile": "stages.profile"}
PROJECT_ROOT = Path(__file__).resolve().parent.parent
Mode = Literal["inline", "subprocess"] | Docker


# Never handed to a stage process (candidate code runs there): API keys, tokens, passwords, cloud credentials.
SECRET = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|^OPENAI_|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^HF_|^PREFECT_API",
                    re.IGNORECASE)


def stage_env(request: StageRequest) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not SECRET.search(k)}
    env["PYTHONFAULTHANDLER"] = "1"  # a crashing candidate leaves a Python traceback in the stage log
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    if getattr(request, "device", None) == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton candidates run on CPU tensors through the interpreter
    else:
        env.pop("TRITON_INTERPRET", None)
    env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(request.blob_dir).parent / "torch_extensions"))
    return env


def _describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by signal {signal.Signals(-code).name}"
    return f"exited with status {code} without writing a result"


def run_stage(name: str, request: StageRequest, mode: Mode = "subprocess") -> StageResult:
    module = importlib.import_module(STAGES[name])
    if mode == "inline":
        return module.run(request)
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    req_path, res_path, log_path = (workdir / f"{name}.{suffix}" for suffix in ("request.json", "result.json", "log"))
    res_path.unlink(missing_ok=True)
    started = time.perf_counter()
    if isinstance(mode, Docker):
        code, kind, why = run_in_container(STAGES[name], request, mode, req_path, res_path, log_path)
    else:
        req_path.write_text(request.model_dump_json())
        code, kind, why = _run_process(STAGES[name], request, req_path, res_path, log_path)
    log_bytes = log_path.read_bytes()
    log_blob = put_bytes(request.blob_dir, log_bytes)
    if res_path.exists() and kind == "crash":
        result = module.Result.model_validate_json(res_path.read_text())
        result.blobs.setdefault("stage_log", log_blob)
        return result
    tail = log_bytes.decode(errors="replace")[-2000:]
    if code == INFRA_EXIT and kind == "crash":
        raise InfrastructureError(f"stage {name} failed outside the candidate ({why}); log {log_path}:\n{tail}")
    result = module.failed(request, kind, f"{why}. Log tail:\n{tail}", {"stage_log": log_blob})
    result.duration_s = time.perf_counter() - started
    return result


def _run_process(module: str, request: StageRequest, req_path: Path, res_path: Path,
                 log_path: Path) -> tuple[int | None, str, str]:
    """`python -m MODULE` in a process group of its own; (exit status or None at the deadline, kind, why)."""
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", module, str(req_path), str(res_path)], cwd=req_path.parent,
                                stdout=log, stderr=subprocess.STDOUT, env=stage_env(request), start_new_session=True)
        try:
            code = proc.wait(timeout=request.timeout_s)
            return code, "crash", _describe_exit(code)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, "timeout", f"killed after the {request.timeout_s:.0f} s deadline"
