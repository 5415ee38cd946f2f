"""Coverage: which template families match a problem and why the others refuse it, per problem and per folder."""

from __future__ import annotations

from pathlib import Path

from kernelflow.cli import main
from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.proposers.coverage import coverage, gist, scan, summary
from kernelflow.stages.templates import TEMPLATES
from tests.families import WRITTEN

ROOT = Path(__file__).resolve().parents[3]
TAIL = '''

def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []


WORKLOADS = {"gpu": [dict(rows=4096, cols=4096)], "cpu": [dict(rows=5, cols=7)]}
'''
DATA_DEPENDENT = '''import torch
import torch.nn as nn

rows, cols = 4096, 4096


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on data: torch.fx cannot trace it
            return x * 2
        return x
''' + TAIL
BREAKS_TRACER = '''import torch
import torch.nn as nn

rows, cols = 4096, 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = int(torch.ones(1).sum().item())  # built on the meta device for tracing: .item() raises there

    def forward(self, x):
        return x * self.k
''' + TAIL


def write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return folder / name


def test_a_matching_family_and_every_other_familys_reason():
    cov = coverage(load_problem(ROOT / "problems" / "01_softmax.py"))
    assert cov.matched == ["rowwise", "inductor"] and set(cov.refused) == set(TEMPLATES) - {"rowwise", "inductor"}
    assert cov.refused["matmul"] == "no matmul, mm, bmm, @ or linear in forward"


def test_the_run_policy_is_the_families_policy():
    problem = load_problem(ROOT / "problems" / "11_linear_bias_gelu.py")
    strict = problem.model_copy(update={"policy": problem.policy.model_copy(update={"allow_vendor_libraries": False})})
    assert "library_epilogue" in coverage(problem, families=WRITTEN).matched
    assert coverage(strict, families=WRITTEN).refused["library_epilogue"] == "the policy forbids vendor libraries"


def test_a_reference_the_tracer_refuses_or_that_breaks_it_is_every_familys_reason(tmp_path: Path):
    refused = coverage(load_problem(write(tmp_path, "data_dependent.py", DATA_DEPENDENT)))
    assert not refused.matched and set(refused.refused) == set(TEMPLATES)
    assert all(r.startswith("torch.fx cannot trace forward") for f, r in refused.refused.items() if f != "inductor")
    assert refused.refused["inductor"].startswith("Inductor: torch.compile cannot compile forward"), refused
    broken = coverage(load_problem(write(tmp_path, "breaks_tracer.py", BREAKS_TRACER)))
    assert not broken.matched and set(broken.refused) == set(TEMPLATES)
    assert all(r.startswith("tracing the reference failed: ") for r in broken.refused.values()), broken


def test_a_folders_summary_counts_problems_and_names_the_common_refusals(tmp_path: Path):
    folder = tmp_path / "suite"
    write(folder, "a_softmax.py", (ROOT / "problems" / "01_softmax.py").read_text())
    write(folder, "b_sort.py", (ROOT / "tests" / "fixtures" / "problems" / "sort.py").read_text())
    write(folder, "c_data_dependent.py", DATA_DEPENDENT)
    write(folder, "d_no_model.py", "import torch\n")
    entries = scan(sorted(folder.glob("*.py")))
    assert [e.coverage is None for e in entries] == [False, False, False, True] and "Model" in entries[3].error
    line = summary("suite", entries)
    assert line.startswith("suite: 1 of 3 problems with at least one family (1 more do not load)"), line
    assert line.endswith("; the most common refusals of the 2 without: 'aten.sort: a sort: no family lowers it' (1); "
                         "'torch.fx "
                         "cannot trace forward: TraceError: symbolically traced variables cannot be used as inputs to "
                         "control flow' (1)"), line


def test_a_summary_of_some_families_names_their_refusals_not_the_families_left_out(tmp_path: Path):
    """Asked for one family, each problem's other families are 'left out by the request': not a refusal, never the
    most common one."""
    path = write(tmp_path / "suite", "sort.py", (ROOT / "tests" / "fixtures" / "problems" / "sort.py").read_text())
    entries = scan([path], "cpu", ["rowwise"])
    assert entries[0].coverage is not None and len(entries[0].coverage.refused) == len(TEMPLATES)
    line = summary("suite", entries)
    assert line.endswith("the most common refusals of the 1 without: 'aten.sort: a sort: no family lowers it' (1)"), line


def test_gist_drops_the_particulars():
    assert gist("unsupported op 'matmul' (%matmul : [num_users=1] = call_function[target=torch.matmul](args = (%a)))") \
        == "unsupported op 'matmul'"
    assert gist("the output of shape [7, 96] is not a whole-tensor reduction") == \
        "the output of shape [...] is not a whole-tensor reduction"
    assert gist("mean reduces over dim 1 of x_2 (a Conv2d's output)") == "mean reduces over dim N of x_2"


def test_the_cli_prints_a_line_per_problem_and_per_folder_never_a_traceback(tmp_path: Path, capsys):
    folder = tmp_path / "suite"
    write(folder, "a_softmax.py", (ROOT / "problems" / "01_softmax.py").read_text())
    write(folder, "b_breaks_tracer.py", BREAKS_TRACER)
    assert main(["problems", "coverage", str(folder)]) == 0
    out = capsys.readouterr().out
    assert f"ok      {folder / 'a_softmax.py'}: rowwise, inductor" in out and "Traceback" not in out
    assert f"none    {folder / 'b_breaks_tracer.py'}: no family matches\n" in out
    assert "          matmul: tracing the reference failed: RuntimeError" in out  # refusals of the unmatched
    assert "          matmul: no matmul" not in out  # a matched problem's refusals only with --all-reasons
    assert f"{folder}: 1 of 2 problems with at least one family; the most common refusals of the 1 without: " \
           "'tracing the reference failed: RuntimeError" in out
    write(folder, "c_no_model.py", "import torch\n")
    assert main(["problems", "coverage", str(folder), "--all-reasons"]) == 1
    out = capsys.readouterr().out
    assert "BROKEN  " in out and "          matmul: no matmul" in out


def test_a_targeted_family_is_asked_for_the_device_given(monkeypatch):
    """A run's coverage is its device's: a family that generates per device (inductor) gets the run's device, not
    whatever this machine has."""
    from types import SimpleNamespace

    from kernelflow.stages.templates.program import TemplateMismatch

    asked: list[str] = []

    def match(problem, traced, device):
        asked.append(device)
        raise TemplateMismatch(f"asked for {device}")

    monkeypatch.setattr("kernelflow.stages.proposers.builtin.TEMPLATES", {"probe": SimpleNamespace(TARGETED=True, match=match)})
    monkeypatch.setattr("kernelflow.stages.proposers.coverage.TEMPLATES", {"probe": None})
    problem = load_problem(ROOT / "problems" / "09_silu.py")
    assert coverage(problem, "cuda").refused == {"probe": "asked for cuda"}
    assert coverage(problem, "cpu").refused == {"probe": "asked for cpu"} and asked == ["cuda", "cpu"]
