"""Problem files: our suite loads and runs; broken files get an error naming the file and the fault."""

from pathlib import Path

import pytest

from kernelflow.stages.errors import ProblemError
from kernelflow.stages.problems.kernelbench import check_runs, load_problem

ROOT = Path(__file__).resolve().parents[3]
SUITE = sorted((ROOT / "problems").glob("*.py"))
BROKEN = {
    "no_model.py": "defines no class Model",
    "no_get_inputs.py": "defines no function get_inputs()",
    "bad_workload_key.py": "overrides 'size', which the module does not define",
    "import_error.py": "does not import: ModuleNotFoundError",
    "nan_reference.py": "reference output has NaN/Inf",
    "missing.py": "no such file",
}


def test_suite_has_singles_and_fusions():
    assert len(SUITE) >= 12


@pytest.mark.parametrize("path", SUITE, ids=lambda p: p.stem)
def test_suite_problem_loads_and_runs(path: Path):
    problem = load_problem(path)
    assert problem.gpu_workloads and problem.cpu_workloads and len(problem.source_sha256) == 64
    assert len(check_runs(problem, "cpu")) == len(problem.cpu_workloads)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_problem_is_named_and_explained(name: str):
    path = ROOT / "tests" / "fixtures" / "broken_problems" / name
    with pytest.raises(ProblemError) as err:
        check_runs(load_problem(path), "cpu")
    assert str(path) in str(err.value) and BROKEN[name] in str(err.value)


def test_plain_kernelbench_file_has_one_gpu_shape(tmp_path: Path):
    text = (ROOT / "problems" / "09_silu.py").read_text().split("WORKLOADS")[0]
    (tmp_path / "plain.py").write_text(text)
    problem = load_problem(tmp_path / "plain.py")
    assert [w.params for w in problem.gpu_workloads] == [{}] and problem.cpu_workloads == []
