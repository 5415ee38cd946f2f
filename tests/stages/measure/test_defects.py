"""The defect fixtures (one deliberately slow but correct kernel per micro-profiling tool) stay correct.

Their real test is on a GPU (scripts/capture_ncu_fixtures.py: does the tool fire?); here every problem loads,
every Triton candidate verifies on CPU through the interpreter and every CUDA candidate builds for sm_90a.
"""

import importlib.util
from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, CompileRequest, Origin, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.measure.tools import TOOLS
from kernelflow.stages.problems.kernelbench import load_problem

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("capture_ncu_fixtures", ROOT / "scripts" / "capture_ncu_fixtures.py")
CAPTURE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(CAPTURE)
# (problem file, candidate file) per defect, as the GPU capture runs them
ENTRIES = {name: (problem, cand) for name, problem, cand, expected in CAPTURE.entries() if expected}


def test_one_defect_per_tool_and_every_file_used():
    assert set(ENTRIES) == set(TOOLS)
    files = {p for pair in ENTRIES.values() for p in pair}
    assert set(CAPTURE.DEFECTS.glob("*.py")) <= files  # no defect file that the capture would skip


@pytest.mark.parametrize("name", sorted(ENTRIES))
def test_defect_is_a_correct_kernel(name: str, tmp_path: Path):
    problem_path, candidate_path = ENTRIES[name]
    problem = load_problem(problem_path)
    source = candidate_path.read_text()
    if "load_inline" in source:  # runs only on a GPU; here its CUDA source must build for sm_90a
        cuda = Candidate.make(problem.id, "cuda", source, Origin(kind="user", proposer="defect"))
        built = run_stage("compile", CompileRequest(candidate=cuda, problem=problem, workdir=str(tmp_path / "c")))
        assert built.status == "ok" and built.kernels, built.message
        return
    candidate = Candidate.make(problem.id, "triton", source, Origin(kind="user", proposer="defect"))
    result = run_stage("verify", VerifyRequest(problem=problem, candidate=candidate, workdir=str(tmp_path / "w"),
                                               trials=2), "inline")
    assert result.status == "ok", result.message
