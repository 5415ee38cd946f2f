"""Where and with what a number was measured."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from functools import cache
from pathlib import Path

import torch

from kernelflow.stages.contracts import Device, Provenance


@cache
def code_version() -> str:
    """The short commit of the git repository whose top level is the project root, "-dirty" appended when tracked
    files differ from it; else $KERNELFLOW_CODE_VERSION (what a caller hands a stage container); else "unknown".
    The project root is the folder two above stages/measure: a checkout's root, or an installed package's kernelflow
    folder, never a repository's top level. A repository the project merely lies inside does not count, and the
    caller's GIT_* variables (a git hook's GIT_DIR) are not passed to git, so they cannot name another one."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}

    def git(*args: str) -> str | None:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=5, env=env)
        return out.stdout.strip() if out.returncode == 0 else None

    try:
        top = git("rev-parse", "--show-toplevel")
        head = git("rev-parse", "--short=12", "HEAD") if top and Path(top).resolve() == root else None
        if head:
            return head + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return os.environ.get("KERNELFLOW_CODE_VERSION", "unknown")


def _nvml() -> tuple[str | None, int | None, int | None]:
    try:
        import pynvml  # nvidia-ml-py; present on GPU workers

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
        driver = pynvml.nvmlSystemGetDriverVersion()
        sm = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        mem = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        return (driver.decode() if isinstance(driver, bytes) else driver), sm, mem
    except Exception:  # NVML missing or unsupported: recorded as None ("not measured")
        return None, None, None


def _triton() -> str | None:
    try:
        import triton

        return triton.__version__
    except ImportError:
        return None


def collect(device: Device) -> Provenance:
    if device == "cuda":
        name = torch.cuda.get_device_name()
        driver, sm, mem = _nvml()
    else:
        name, driver, sm, mem = platform.processor() or platform.machine(), None, None, None
    return Provenance(device=device, device_name=name, driver=driver, sm_clock_mhz=sm, mem_clock_mhz=mem,
                      torch=torch.__version__, cuda=torch.version.cuda, triton=_triton(),
                      python=platform.python_version(), hostname=socket.gethostname(), code_version=code_version(),
                      tf32=bool(torch.backends.cuda.matmul.allow_tf32), tf32_conv=bool(torch.backends.cudnn.allow_tf32))
