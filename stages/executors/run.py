"""Where a stage runs: inline (trusted, cheap), in a sandboxed subprocess with a deadline (anything running candidate
code), or in a container of its own (stages/executors/docker.py: no network, read-only root, limits, non-root user).

A candidate that crashes the process, calls os._exit, hangs or poisons the CUDA context only loses its own
process: the executor turns that into a failure result with the process log named in its files, and says during which
phase the process ended (stages/phase.py): the candidate's code (then the candidate ended it, whatever the exit
status), or a step whose crash has a verdict of its own (verify's held-out shape: shape hard-coding, `cheat`).
Inline stages share the flow's process, keys included: inline is for trusted code and tests.

A stage subprocess (stages/executors/sandbox.py, `Sandbox`) gets the environment without secrets (SECRET: API keys, tokens,
cloud credentials), a temp dir and home of its own in the call's work dir, writes confined to the work dir and the
compile caches where the kernel has Landlock, limits the kernel enforces on it and on every process it starts (CPU
time from the deadline, file size, no core dumps, processes; address space where no GPU code runs), the resident
memory of its process tree watched from here (`_watch`: an "oom" past the sandbox's resident_bytes), and, where the
kernel allows an unprivileged user namespace, a network namespace with loopback only. The result's `sandbox` record
says which of these applied and why not; a process killed at its CPU-time limit is a "timeout". What it does not
get, unlike a container: a private /proc and /dev, or a view of the file system without the host's other files
(it can read what its uid can; docs/INTEGRITY.md).

Every process of a subprocess call ends with the call, whichever way it ends (the stage process exits, the deadline,
the memory limit, an exception here): its process group, the processes seen in its tree, and those that carry the
call's mark in their environment (stages/executors/marks.py: in another session or orphaned alike). Should this
process be killed instead, its guard ends every process carrying its mark (stages/executors/owner_guard.py).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Literal

from kernelflow.stages import phase
from kernelflow.stages.contracts import StageRequest, StageResult
from kernelflow.stages.entry import INFRA_EXIT
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors import marks
from kernelflow.stages.executors.docker import Docker, run_in_container
from kernelflow.stages.executors.owner_guard import ensure_guard
from kernelflow.stages.executors.sandbox import ENTER_FAILED, Plan, Sandbox, descendants, plan
from kernelflow.stages.problems import fx_trace

STAGES = {"compile": "kernelflow.stages.compile", "verify": "kernelflow.stages.verify", "benchmark": "kernelflow.stages.benchmark",
          "profile": "kernelflow.stages.profile"}
PROJECT_ROOT = Path(__file__).resolve().parents[2]
WATCH_S = 0.25  # how often a stage process's memory is read
Mode = Literal["inline", "subprocess"] | Docker | Sandbox  # "subprocess" is Sandbox()


# Never handed to a stage process (candidate code runs there): API keys, tokens, passwords, cloud credentials.
SECRET = re.compile(r"KEY|SECRET|TOKEN|PASSW|CREDENTIAL|^OPENAI_|^AWS_|^AZURE_|^GOOGLE_APPLICATION|^HF_|^PREFECT_API",
                    re.IGNORECASE)


def stage_env(request: StageRequest) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not SECRET.search(k)}
    env["PYTHONFAULTHANDLER"] = "1"  # a crashing candidate leaves a Python traceback in the stage log
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    if getattr(request, "device", None) == "cpu":
        env["TRITON_INTERPRET"] = "1"  # Triton candidates run on CPU tensors through the interpreter
        # a CPU request sees no GPU, and torch counts none through NVML, without starting CUDA (which its sandbox
        # does not let start: torch would warn of the failure in the stage log)
        env["CUDA_VISIBLE_DEVICES"], env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "", "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    if request.cache_dir is not None:
        env.setdefault("TORCH_EXTENSIONS_DIR", str(Path(request.cache_dir) / "torch_extensions"))
    return env


def _describe_exit(code: int, sandbox: Plan) -> tuple[str, str]:
    """(kind, why) of a stage process that ended without a result: "crash", or the verdict of a sandbox limit."""
    if code < 0:
        return sandbox.verdict(-code) or ("crash", f"killed by signal {signal.Signals(-code).name}")
    return "crash", f"exited with status {code} without writing a result"


def forget_candidate(request: StageRequest) -> None:
    """Drop the module of the request's candidate, which an inline stage imported (stages/harness/candidate.py names it
    kf_cand_<id>): each stage call imports its candidate afresh, and kept, they grow the flow process by ~55 kB per
    candidate (measured: docs/LOG.md). Only this call's: another thread's inline stage may be importing its own.
    With the module go the two caches that would hold its code after it: linecache's copy of
    its file (Triton reads the source through inspect) and the Triton interpreter's rewritten kernels, keyed by the
    module's functions. (kernelflow.stages.harness.candidate, imported here, brings torch, which the inline stage has imported.)"""
    if (candidate := getattr(request, "candidate", None)) is None:
        return
    import linecache

    from kernelflow.stages.harness.candidate import CANDIDATE_MODULE_PREFIX

    name = f"{CANDIDATE_MODULE_PREFIX}{candidate.id}"
    module = sys.modules.pop(name, None)
    if (path := getattr(module, "__file__", None)) is not None:
        linecache.cache.pop(path, None)
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is not None:
        rewritten = interpreter.InterpretedFunction.rewritten_fn
        for fn in [fn for fn in list(rewritten) if getattr(fn, "__module__", None) == name]:
            rewritten.pop(fn, None)


def run_stage(name: str, request: StageRequest, mode: Mode = "subprocess") -> StageResult:
    """The stage's result for `request`, the stage run where `mode` says; a compile always in a process of its own
    (it patches Triton's driver and load_inline for the whole process), so "inline" runs it as "subprocess"."""
    module = importlib.import_module(STAGES[name])
    if mode == "inline" and name == "compile":
        mode = "subprocess"
    if mode == "inline":
        try:
            with fx_trace.LOCK:  # the stage calls nn.Modules in the flow's process, where proposals trace
                return module.run(request)
        finally:
            forget_candidate(request)
    workdir = Path(request.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    req_path, res_path, log_path = (workdir / f"{name}.{suffix}" for suffix in ("request.json", "result.json", "log"))
    res_path.unlink(missing_ok=True)
    phase.path_for(res_path).unlink(missing_ok=True)  # an earlier call's, which would speak for this one
    started = time.perf_counter()
    record: dict[str, str] = {}  # the subprocess sandbox's (stages/executors/sandbox.py)
    if isinstance(mode, Docker):
        code, kind, why = run_in_container(STAGES[name], request, mode, req_path, res_path, log_path)
    else:
        req_path.write_text(request.model_dump_json())
        sandbox = mode if isinstance(mode, Sandbox) else Sandbox()
        code, kind, why, record = _run_process(name, request, sandbox, req_path, res_path, log_path)
    log_bytes = log_path.read_bytes()
    log_file = log_path.relative_to(workdir).as_posix()
    if res_path.exists() and kind == "crash":
        result = module.Result.model_validate_json(res_path.read_text())
        result.files.setdefault("stage_log", log_file)
        result.sandbox = record
        return result
    tail = log_bytes.decode(errors="replace")[-2000:]
    died = phase.died(res_path)  # what the process was running when it ended (stages/phase.py)
    if code == INFRA_EXIT and kind == "crash" and not (died and died.candidate):
        raise InfrastructureError(f"stage {name} failed outside the candidate ({why}); log {log_path}:\n{tail}")
    if died is not None:
        kind, why = died.verdict(kind, why)
    evidence = f"{why}. Log tail:\n{tail}" if tail.strip() else f"{why}; the log is empty"
    result = module.failed(request, kind, evidence, {"stage_log": log_file})
    result.duration_s, result.sandbox = time.perf_counter() - started, record
    return result


def _run_process(name: str, request: StageRequest, sandbox: Sandbox, req_path: Path, res_path: Path,
                 log_path: Path) -> tuple[int | None, str, str, dict[str, str]]:
    """`python -m stages.NAME` in a process group and sandbox of its own, marked as this process's and as this call's
    (stages/executors/marks.py); (exit status or None when it had to be ended, kind, why, the sandbox's record).
    However the call ends, every process of it is ended with it (`_end`)."""
    withheld = [k for k in os.environ if SECRET.search(k)]
    call = plan(sandbox, name, request, stage_env(request), withheld)
    mark = uuid.uuid4().hex
    try:
        with open(log_path, "wb") as log:
            ensure_guard()  # should this process be killed, its guard ends what it started (owner_guard.py)
            try:
                proc = subprocess.Popen([sys.executable, "-m", STAGES[name], str(req_path), str(res_path)],
                                        cwd=req_path.parent, stdout=log, stderr=subprocess.STDOUT,
                                        env=call.env | {marks.OWNER_MARK: marks.owner(), marks.CALL_MARK: mark},
                                        start_new_session=True, preexec_fn=call.enter)
            except subprocess.SubprocessError as e:  # the probe said it would work: not the candidate's doing
                said = [line for line in log_path.read_text(errors="replace").splitlines()
                        if line.startswith(ENTER_FAILED)]
                why = said[-1].removeprefix(ENTER_FAILED) if said else f"{e}; the child said nothing"
                raise InfrastructureError(f"stage {name}: the process could not enter its sandbox ({why}); "
                                          f"{call.record}") from e
            seen: dict[int, str] = {}
            try:
                killed = _watch(proc, request.timeout_s, call.resident_bytes, seen)
            finally:
                code = _end(proc, seen, mark)
            if killed is not None:
                return None, *killed, call.record
            return code, *_describe_exit(code, call), call.record
    finally:
        call.clean()


def _watch(proc: subprocess.Popen, timeout_s: float, resident_bytes: int, seen: dict[int, str]) -> tuple[str, str] | None:
    """Wait for the stage process to exit, left unreaped; None, or when it has to be ended first, (kind, why): at the
    deadline ("timeout"), or when its processes together held more than `resident_bytes` ("oom"), read from /proc
    every WATCH_S. Every process seen in its tree meanwhile is added to `seen`, with its start time."""
    deadline = time.monotonic() + timeout_s
    while True:
        if _exited(proc, max(0.0, min(WATCH_S, deadline - time.monotonic()))):
            return None
        tree = {proc.pid, *descendants(proc.pid)}
        for pid in tree - seen.keys():
            if (start := marks.started(pid)) is not None:
                seen[pid] = start
        if (held := resident(tree)) > resident_bytes:
            return "oom", (f"killed when its processes held {held / 2**30:.2f} GiB of resident memory, over its limit "
                           f"of {resident_bytes / 2**30:.2f} GiB")
        if time.monotonic() >= deadline:
            return "timeout", f"killed after the {timeout_s:.0f} s deadline"


def _exited(proc: subprocess.Popen, timeout_s: float) -> bool:
    """Whether the stage process exits within `timeout_s`. It is not reaped: until `_end` reaps it, its pid, and
    so its process group's id, stay its own."""
    until, pause = time.monotonic() + timeout_s, 0.0005
    try:
        while os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            if (left := until - time.monotonic()) <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(2 * pause, 0.05)
    except ChildProcessError:  # reaped already (SIGCHLD ignored)
        pass
    return True


def _end(proc: subprocess.Popen, seen: dict[int, str], mark: str) -> int:
    """SIGKILL to every process of the call, then the stage process's exit status, reaped: to the stage process's
    group, to every process `seen` in its tree that is still the one seen (same start time: one that left the
    group), and to every process that carries the call's mark (one started since the last look, or orphaned: in no
    tree)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    for pid, start in seen.items():
        if pid != proc.pid and marks.started(pid) == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    marks.end(marks.CALL_MARK, lambda value: value == mark)
    return proc.wait()


def resident(pids: set[int]) -> int:
    """Resident memory of these processes together, in bytes (VmRSS; one that ended meanwhile counts 0)."""
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total
