"""SOL-ExecBench definitions as problems (stages/problems/solexec.py): a definition folder translates into a problem module that
loads, validates and runs on every workload; verify judges candidates against it; malformed definitions are refused
with the file and the reason; a campaign suite takes a definition as an entry."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelflow.stages.errors import ProblemError
from kernelflow.stages.problems.kernelbench import check_runs, import_problem, load_problem, workload_call
from kernelflow.stages.problems.solexec import resolve, translate

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "solexec"
SOFTMAX = FIXTURES / "scaled_softmax"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KERNELFLOW_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_definition_becomes_a_problem_that_runs_every_workload(cache: Path):
    path = translate(SOFTMAX)
    assert path.startswith(str(cache)) and translate(SOFTMAX / "definition.json") == path  # content-addressed
    problem = load_problem(path)
    assert problem.id == "scaled_softmax_h4" and problem.dtype == "float32"
    assert (problem.tolerance.atol, problem.tolerance.rtol) == (1e-4, 1e-4)  # the tightest line's correctness
    assert [w.params for w in problem.gpu_workloads] == [{"workload_line": 1, "batch": 2, "cols": 96},
                                                         {"workload_line": 2, "batch": 1, "cols": 600},
                                                         {"workload_line": 3, "batch": 64, "cols": 1024}]
    assert [w.name for w in problem.cpu_workloads] == ["cpu0", "cpu1"]  # line 3 (256 x 1024) is too big for CPU
    assert len(check_runs(problem, "gpu")) == 3  # the reference, on CPU, at every workload line
    module = import_problem(path)
    third = problem.gpu_workloads[2]
    (x,) = workload_call(module, third, "get_inputs")
    scale = workload_call(module, third, "get_init_inputs")
    assert x.shape == (64 * 4, 1024) and scale == [0.125]  # rows = batch * heads; the line's own scalar
    assert torch.allclose(module.Model(*scale)(x), torch.softmax(x * 0.125, dim=-1), atol=1e-6)


def test_custom_inputs_come_from_the_definitions_own_generator():
    """index_add/: every input `custom` (made by the reference's make_inputs), and its first workload line written as
    a FlashInfer trace line ({"definition": ..., "workload": {...}})."""
    problem = load_problem(translate(FIXTURES / "index_add"))
    assert problem.tolerance == load_problem(ROOT / "problems" / "01_softmax.py").tolerance  # no correctness: fp32's
    assert len(check_runs(problem, "cpu")) == 2
    module = import_problem(problem.path)
    states, expert_out, index = workload_call(module, problem.cpu_workloads[1], "get_inputs")
    assert states.shape == (33, 64) and expert_out.shape == (99, 64) and 0 <= int(index.min()) <= int(index.max()) < 33


def kf(*args: str, cache: Path, store: Path) -> subprocess.CompletedProcess:
    env = {"KERNELFLOW_STORE": str(store), "KERNELFLOW_CACHE": str(cache), "PATH": "/usr/bin:/bin:/usr/local/bin",
           "TRITON_INTERPRET": "1"}  # for --executor inline (the subprocess executor sets it itself)
    return subprocess.run([sys.executable, "-m", "kernelflow.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=300)


@pytest.mark.slow
def test_verify_on_cpu_passes_a_correct_candidate_and_fails_a_wrong_one(tmp_path: Path, cache: Path):
    good = kf("verify", str(SOFTMAX), str(FIXTURES / "good_triton.py"), "--device", "cpu", cache=cache,
              store=tmp_path)
    assert good.returncode == 0 and "VERIFIED" in good.stdout, good.stdout + good.stderr
    wrong = kf("verify", str(SOFTMAX / "definition.json"), str(FIXTURES / "wrong_triton.py"), "--device", "cpu",
               "--executor", "inline", cache=cache, store=tmp_path)
    assert wrong.returncode == 1 and "mismatch" in wrong.stdout and "REJECTED" in wrong.stderr, wrong.stdout


def broken_copy(tmp_path: Path, edit) -> Path:
    folder = tmp_path / "broken"
    shutil.copytree(SOFTMAX, folder, dirs_exist_ok=True)
    definition = json.loads((folder / "definition.json").read_text())
    lines = (folder / "workload.jsonl").read_text().splitlines()
    edit(definition, lines)
    (folder / "definition.json").write_text(json.dumps(definition))
    (folder / "workload.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def _line(lines: list[str], i: int, **changes) -> None:
    lines[i] = json.dumps({**json.loads(lines[i]), **changes})


MALFORMED = {
    "missing field 'reference'": lambda d, lines: d.pop("reference"),
    "shape names unknown axis 'width'": lambda d, lines: d["inputs"]["x"].update(shape=["rows", "width"]),
    "names unknown axis 'seq'": lambda d, lines: d["axes"]["rows"].update(expression="batch * seq"),
    "Call is not arithmetic": lambda d, lines: d["axes"]["rows"].update(expression="__import__('os').getpid()"),
    "bad expression 'batch \\*'": lambda d, lines: d["axes"]["rows"].update(expression="batch *"),
    "unknown dtype 'float12'": lambda d, lines: d["outputs"]["y"].update(dtype="float12"),
    "needs a positive integer `value`": lambda d, lines: d["axes"]["heads"].update(value="4"),
    "defines no global function run": lambda d, lines: d.update(reference="def forward(x, scale):\n    return x\n"),
    "in a cycle": lambda d, lines: d["axes"].update(batch={"type": "expr", "expression": "rows // heads"}),
    "line 2 does not parse": lambda d, lines: lines.__setitem__(1, '{"uuid": "w2", "axes": {'),
    "'seq' is not a var axis": lambda d, lines: _line(lines, 0, axes={"batch": 2, "cols": 96, "seq": 3}),
    "no value for var axis cols": lambda d, lines: _line(lines, 2, axes={"batch": 2}),
    "constraint 'rows == batch \\* heads \\+ 1' does not hold": lambda d, lines: d.update(
        constraints=["rows == batch * heads + 1"]),
    "safetensors inputs are not supported": lambda d, lines: _line(
        lines, 0, inputs={"x": {"type": "safetensors", "path": "x.st", "tensor_key": "x"},
                          "scale": {"type": "scalar", "value": 1.0}}),
    "a scalar input needs a numeric `value`": lambda d, lines: _line(
        lines, 1, inputs={"x": {"type": "random"}, "scale": {"type": "scalar"}}),
    "correctness max_atol = 'tight'": lambda d, lines: _line(lines, 1, correctness={"max_atol": "tight"}),
}


@pytest.mark.parametrize("reason", list(MALFORMED))
def test_a_malformed_definition_is_refused_with_the_file_and_the_reason(tmp_path: Path, reason: str):
    folder = broken_copy(tmp_path, MALFORMED[reason])
    with pytest.raises(ProblemError, match=reason) as refused:
        translate(folder)
    assert str(folder) in str(refused.value)  # definition.json, or workload.jsonl with the line number


def test_problems_validate_reads_definition_folders(tmp_path: Path, capsys: pytest.CaptureFixture):
    from kernelflow.cli import main

    broken_copy(tmp_path, MALFORMED["unknown dtype 'float12'"])
    shutil.copytree(SOFTMAX, tmp_path / "scaled_softmax")
    assert main(["problems", "validate", str(SOFTMAX)]) == 0
    assert "ok      " + str(SOFTMAX) + ": dtype float32, 3 GPU and 2 CPU shapes" in capsys.readouterr().out
    assert main(["problems", "validate", str(tmp_path)]) == 1  # a folder of definition folders
    out = capsys.readouterr().out
    assert f"ok      {tmp_path / 'scaled_softmax'}" in out and "BROKEN" in out and "unknown dtype 'float12'" in out


def test_a_suite_runs_a_solexec_entry_through_the_campaign(prefect_harness, tmp_path: Path):
    from kernelflow.artifacts.campaigns import entries
    from kernelflow.artifacts.store import Store
    from kernelflow.flows.campaign import campaign
    from kernelflow.flows.suite import load_suite

    broken = broken_copy(tmp_path, MALFORMED["missing field 'reference'"])
    suite_file = tmp_path / "suite.yaml"
    suite_file.write_text(f"""
name: ci-solexec
device: cpu
executor: inline
defaults: {{budget: 1, profile: false}}
problems:
  - {{solexec: {SOFTMAX}}}
  - {{problem: {broken / 'definition.json'}}}
""")
    suite = load_suite(suite_file)
    assert [e.name for e in suite.problems] == ["scaled_softmax", "broken"]
    assert suite.problem_path(suite.problems[0]) == resolve(SOFTMAX)
    result = campaign(str(suite_file), store=str(tmp_path / "store"))
    assert result["problems"]["scaled_softmax"]["status"] == "finished", result
    assert result["problems"]["broken"]["status"] == "failed"  # the broken definition fails alone, saying why
    rows = entries(Store(str(tmp_path / "store")), result["campaign_id"])
    assert "missing field 'reference'" in rows[rows.entry == "broken"].message.iloc[-1]
