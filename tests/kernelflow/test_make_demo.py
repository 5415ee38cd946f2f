"""`make demo` picks its arguments from what the venv's torch sees (the GPU set where CUDA is available, else the
CPU set) and stops with the reason where that torch does not import, rather than run the CPU demo on a GPU host.
The venv is stood in for by a BIN of two scripts: a `python` that answers the probe, a `kernelflow` that logs."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROBES = {"gpu": "echo 1", "cpu": "echo 0", "broken": "echo 'ModuleNotFoundError: No module named torch' >&2; exit 1"}


def demo(tmp_path: Path, probe: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    log = tmp_path / "calls"
    (bin_ / "python").write_text(f"#!/bin/sh\n{PROBES[probe]}\n")
    (bin_ / "kernelflow").write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    for f in bin_.iterdir():
        f.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}  # not `make test`'s
    out = subprocess.run(["make", "-s", "-o", "install", "demo", f"BIN={bin_}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    return out, log.read_text().splitlines() if log.exists() else []


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("probe, args", [("gpu", "--budget 6 --families elementwise --timing-budget 5 --wall-time 150"),
                                         ("cpu", "--budget 3 --families elementwise --timing-budget 1")])
def test_the_demo_runs_the_set_for_what_torch_sees(tmp_path: Path, probe: str, args: str) -> None:
    out, calls = demo(tmp_path, probe)
    assert out.returncode == 0, out.stderr
    assert calls == ["problems validate problems/17_elementwise_chain.py",
                     f"optimize problems/17_elementwise_chain.py {args}"]


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_a_torch_that_does_not_import_stops_the_demo_with_the_reason(tmp_path: Path) -> None:
    out, calls = demo(tmp_path, "broken")
    assert out.returncode != 0 and "cannot import torch" in out.stderr and "No module named torch" in out.stderr
    assert calls == ["problems validate problems/17_elementwise_chain.py"]
