"""Problem files: our suite loads and runs; broken files get an error naming the file and the fault."""

from pathlib import Path

import pytest
import torch

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


SIZES = '''
import torch
import torch.nn as nn

batch, rows, cols, depth = 16, 24, 40, 3  # depth: read through a lambda; cols: through a helper's comprehension
hidden = 96  # read only by the constructor's arguments
unused = 512  # read by neither function
eps = 1e-5  # not an int
strict = True  # a bool is not a size
offset = -1  # not positive


class Model(nn.Module):
    def __init__(self, hidden, strict):
        super().__init__()

    def forward(self, x):
        return x * 2


def _shape():
    return (rows, *[cols for _ in range(1)])


def get_inputs():
    size = lambda: depth  # noqa: E731
    return [torch.randn(batch, *_shape(), size()) + eps + offset]


def get_init_inputs():
    return [hidden, strict]
'''


def test_inputs_drawn_from_a_checked_distribution_load_on_meta():
    """Its sample is taken on meta tensors for the GPU shape (torch.distributions' checks are off for that call
    only), and the loss family takes it."""
    from kernelflow.stages.proposers.coverage import coverage

    checks = torch.distributions.Distribution._validate_args
    problem = load_problem(ROOT / "tests" / "fixtures" / "problems" / "pareto_hinge.py")
    assert problem.dtype == "float32" and torch.distributions.Distribution._validate_args is checks
    assert coverage(problem, "cpu", ["loss"]).matched == ["loss"]

def test_size_constants_are_the_ints_the_input_functions_read(tmp_path: Path):
    """Followed through a helper, a comprehension and a lambda; floats, bools, non-positive ints and constants that
    neither function reads are left out; the module's own order."""
    from kernelflow.stages.problems.kernelbench import import_problem, size_constants

    (tmp_path / "sizes.py").write_text(SIZES)
    assert size_constants(import_problem(tmp_path / "sizes.py")) == \
        {"batch": 16, "rows": 24, "cols": 40, "depth": 3, "hidden": 96}
    plain = import_problem(ROOT / "tests" / "fixtures" / "problems" / "plain_scale_relu.py")
    assert size_constants(plain) == {"batch_size": 64, "features": 256}


def test_loading_a_problem_leaves_the_callers_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(4)
    torch.manual_seed(0)
    load_problem(ROOT / "problems" / "09_silu.py")  # its sample is drawn on the CPU at its first CPU shape
    assert torch.equal(torch.rand(4), expected)
