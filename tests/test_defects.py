"""The defect fixtures (one deliberately slow but correct kernel per micro-profiling tool) stay correct.

Their real test is on a GPU (scripts/capture_ncu_fixtures.py: does the tool fire?); here every problem loads,
every Triton candidate verifies on CPU through the interpreter and every CUDA candidate builds for sm_90a.
"""

from pathlib import Path

import pytest

from stages import compile as compile_stage
from stages.contracts import Candidate, CompileRequest, Origin, VerifyRequest
from stages.executor import run_stage
from stages.problem import load_problem
from stages.tools import TOOLS

DEFECTS = Path(__file__).parent / "fixtures" / "defects"
NAMES = sorted(p.stem.removesuffix("_problem") for p in DEFECTS.glob("*_problem.py"))


def test_one_defect_per_tool():
    assert set(NAMES) == set(TOOLS)


@pytest.mark.parametrize("name", NAMES)
def test_defect_is_a_correct_kernel(name: str, tmp_path: Path):
    problem = load_problem(DEFECTS / f"{name}_problem.py")
    source = (DEFECTS / f"{name}.py").read_text()
    if "load_inline" in source:  # runs only on a GPU; here its CUDA source must build for sm_90a
        cuda = Candidate.make(problem.id, "cuda", source, Origin(kind="user", proposer="defect"))
        built = compile_stage.run(CompileRequest(candidate=cuda, problem=problem, workdir=str(tmp_path / "c"),
                                                 blob_dir=str(tmp_path / "b")))
        assert built.status == "ok" and built.kernels, built.message
        return
    candidate = Candidate.make(problem.id, "triton", source, Origin(kind="user", proposer="defect"))
    result = run_stage("verify", VerifyRequest(problem=problem, candidate=candidate, workdir=str(tmp_path / "w"),
                                               blob_dir=str(tmp_path / "b"), trials=2), "inline")
    assert result.status == "ok", result.message
