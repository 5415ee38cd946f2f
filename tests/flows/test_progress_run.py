"""A real `kernelflow optimize` on the CPU with its output not a terminal: one plain line per finished candidate with
its verdict and times, a line when the run ends, and Prefect's console without its own copies of those lines."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: a Prefect server and a flow run

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"\[(\d)/2\] [0-9a-f]{16} elementwise \{.*\}: (verified, \S+x eager|rejected at \w+: \w+|not kept) "
                  r"\(\d+ s; \d+:\d\d elapsed\)")


def test_optimize_prints_a_plain_line_per_candidate_when_not_on_a_terminal(tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}  # its own Prefect home, in tmp_path
    out = subprocess.run(
        [sys.executable, "-m", "kernelflow.cli", "optimize", str(ROOT / "problems" / "17_elementwise_chain.py"),
         "--budget", "2", "--families", "elementwise", "--timing-budget", "0.5", "--device", "cpu",
         "--store", str(tmp_path / "runs")],
        cwd=tmp_path, env={**env, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    progress = [m for line in lines if (m := LINE.fullmatch(line))]
    assert [m.group(1) for m in progress] == ["1", "2"], out.stdout
    assert any(re.fullmatch(r"run \S+ finished after \d+:\d\d: candidate budget of 2 spent", line) for line in lines)
    assert "search stopped: candidate budget of 2 spent" in out.stderr  # the flow's other lines stay with Prefect's
    assert "[1/2]" not in out.stderr
