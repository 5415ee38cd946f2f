"""A user's mistakes, as a new user makes them: each command ends with plain lines naming what to fix and exit status
1, no traceback unless asked for (--debug, KERNELFLOW_DEBUG=1), and the flow commands never start Prefect for them.

Most commands run through kernelflow.cli.main in this process (its status and output are what `python -m
kernelflow.cli` exits with and prints), where a flow command that went on to start Prefect would pass through
cli._prefect_api; a few run in a fresh interpreter, as a user's do: the broken problems (nothing of Prefect's in its
home after the real exit path), the traceback the interpreter prints, and deploy's check, which reads Prefect's
settings (a flow test's harness in this process would have set them)."""

import contextlib
import io
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from kernelflow.cli import main

ROOT = Path(__file__).resolve().parents[2]
BROKEN = ROOT / "tests" / "fixtures" / "broken_problems"
ADV = ROOT / "tests" / "fixtures" / "adversarial"
SILU = str(ROOT / "problems" / "09_silu.py")
GOOD = str(ADV / "good.py")


def environment(store: Path, **env: str) -> dict[str, str]:
    """What a command runs with here: a new user's shell (no kernelflow, Prefect, LLM or cloud settings)."""
    return {"KERNELFLOW_STORE": str(store), "PATH": "/usr/bin:/bin:/usr/local/bin",
            "PREFECT_HOME": str(store / "prefect"), **env}


def kf(*args: str, store: Path, **env: str) -> tuple[int, str]:
    """The command in a fresh interpreter: its exit status and its stdout + stderr."""
    out = subprocess.run([sys.executable, "-m", "kernelflow.cli", *args], capture_output=True, text=True, cwd=ROOT,
                         env=environment(store, **env), timeout=120)
    return out.returncode, out.stdout + out.stderr


def kf_main(*args: str, store: Path, **env: str) -> tuple[int, str]:
    """The command through kernelflow.cli.main in this process, under `kf`'s environment alone (this process's own
    put back afterwards): its exit status (argparse's usage error exits 2) and its stdout + stderr."""
    saved, out = dict(os.environ), io.StringIO()
    os.environ.clear()
    os.environ.update(environment(store, **env))
    try:
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                status = main(list(args))
            except SystemExit as e:
                status = e.code if isinstance(e.code, int) else 1
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return status, out.getvalue()


def refused(*args: str, says: str, store: Path, fresh: bool = False, **env: str) -> str:
    """The command fails with one or two `kernelflow: error:` lines that say `says`, and no traceback; in a fresh
    interpreter if `fresh`, else through main here."""
    status, output = (kf if fresh else kf_main)(*args, store=store, **env)
    assert status == 1 and "Traceback" not in output and says in output, output
    errors = [line for line in output.splitlines() if line.startswith("kernelflow: error: ")]
    assert 1 <= len(errors) <= 2, output
    return output


def no_prefect(store: Path) -> bool:
    """Nothing of Prefect's in its home (main makes the folder, Prefect's server its database)."""
    return not any((store / "prefect").glob("*"))


@pytest.fixture
def prefect_starts(monkeypatch) -> list[str]:
    """The in-process commands that went on to start Prefect (cli._prefect_api, before every flow command imports
    it), each stopped there with an error that names it."""
    from kernelflow import cli

    started: list[str] = []

    def start() -> None:
        started.append("_prefect_api")
        raise RuntimeError("the command went on to start Prefect")

    monkeypatch.setattr(cli, "_prefect_api", start)
    return started


@pytest.fixture
def syntax_error(tmp_path: Path) -> Path:
    path = tmp_path / "typo.py"
    path.write_text("import torch\n\nclass Model(torch.nn.Module:\n    pass\n")
    return path


def test_verify_and_bench_name_a_broken_or_missing_problem_file(tmp_path: Path, syntax_error: Path):
    refused("verify", str(syntax_error), GOOD, "--device", "cpu", store=tmp_path,
            says=f"problem file {syntax_error}: does not import: SyntaxError")
    refused("bench", str(BROKEN / "no_get_inputs.py"), GOOD, "--device", "cpu", store=tmp_path,
            says="no_get_inputs.py: defines no function get_inputs()")
    refused("verify", str(tmp_path / "missing.py"), GOOD, "--device", "cpu", store=tmp_path,
            says=f"problem file {tmp_path / 'missing.py'}: no such file")


def test_verify_names_a_missing_or_broken_candidate_file_before_any_work(tmp_path: Path):
    (tmp_path / "cand.py").write_text("import torch\nclass ModelNew(torch.nn.Module:\n    pass\n")
    refused("verify", SILU, str(tmp_path / "nope.py"), store=tmp_path, says=f"candidate file {tmp_path / 'nope.py'}: "
            "no such file")
    refused("verify", SILU, str(tmp_path / "cand.py"), store=tmp_path, says="cand.py: does not parse: SyntaxError")
    refused("bench", SILU, str(ADV / "no_model.py"), store=tmp_path, says="no_model.py: defines no class ModelNew")
    assert not (tmp_path / "work").exists()  # nothing was run or recorded


def test_an_unknown_baseline_or_option_value_names_the_option(tmp_path: Path):
    refused("bench", SILU, GOOD, "--baselines", "eager,eagr", store=tmp_path,
            says="--baselines: unknown 'eagr'; known: eager, compile")
    output = refused("optimize", SILU, "--budget", "0", "--families", "rowwize", store=tmp_path,
                     says="--budget: Input should be greater than or equal to 1 (got 0)")
    assert "kernelflow: error: --families: unknown template families ['rowwize']; known: " in output
    status, output = kf_main("optimize", SILU, "--device", "gpu", store=tmp_path)
    assert status == 2 and "invalid choice: 'gpu'" in output  # argparse's own usage error


def test_device_cuda_without_a_gpu_says_so_before_any_work(tmp_path: Path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    refused("bench", SILU, GOOD, "--device", "cuda", store=tmp_path,
            says="--device cuda: no CUDA GPU is visible on this machine (torch ")
    refused("optimize", SILU, "--device", "cuda", store=tmp_path, says="use --device cpu or run on a GPU host")
    assert not (tmp_path / "work").exists()


def test_optimize_on_a_broken_problem_fails_fast_without_starting_prefect(tmp_path: Path, syntax_error: Path):
    for problem, says in ((syntax_error, f"problem file {syntax_error}: does not import: SyntaxError"),
                          (BROKEN / "no_model.py", "no_model.py: defines no class Model(nn.Module)"),
                          (BROKEN / "nan_reference.py", "nan_reference.py: the reference output has NaN/Inf at cpu0")):
        output = refused("optimize", str(problem), "--device", "cpu", store=tmp_path, says=says, fresh=True)
        assert not any(word in output for word in ("prefect", "Prefect", "Starting", "Finished in state")), output
    assert no_prefect(tmp_path)


def test_optimize_checks_resume_and_the_llm_endpoint_before_prefect(tmp_path: Path, prefect_starts: list[str]):
    refused("optimize", SILU, "--device", "cpu", "--resume", "no-such-run", store=tmp_path,
            says=f"--resume no-such-run: no such run in store {tmp_path}")
    refused("optimize", SILU, "--device", "cpu", "--proposer", "llm", store=tmp_path,
            says="--proposer llm: no model: pass --model NAME or set KERNELFLOW_LLM_MODEL")
    with socket.socket() as sock:  # a port nothing listens on: the connection is refused
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    refused("optimize", SILU, "--device", "cpu", "--proposer", "llm", "--model", "m", store=tmp_path,
            OPENAI_BASE_URL=url, OPENAI_API_KEY="k", says=f"the LLM endpoint {url} (OPENAI_BASE_URL) does not answer")
    assert not prefect_starts and no_prefect(tmp_path)


def test_a_suite_with_an_unknown_key_names_the_entry_and_the_known_keys(tmp_path: Path):
    suite = tmp_path / "x.yaml"
    suite.write_text("name: x\nproblems:\n  - 09_silu\n  - {problem: 01_softmax, budgett: 3}\n")
    for command in ("campaign", "serve"):
        output = refused(command, str(suite), store=tmp_path,
                         says=f"suite {suite}: entry 2: unknown key 'budgett' (did you mean 'budget'? known: ")
        assert "pydantic" not in output and "http" not in output
    suite.write_text("name: x\ndefaults: {strategy: greedyy}\nproblems: [09_silu]\n")
    refused("campaign", str(suite), store=tmp_path, says="defaults: strategy: Input should be 'greedy'")
    refused("campaign", str(tmp_path / "nope.yaml"), store=tmp_path, says=f"suite {tmp_path / 'nope.yaml'}: cannot be "
            "read")


def test_a_campaign_whose_entries_are_all_broken_is_refused_before_prefect(tmp_path: Path, prefect_starts: list[str]):
    suite = tmp_path / "x.yaml"
    suite.write_text(f"name: x\nproblems:\n  - no_such_problem\n  - {BROKEN / 'no_get_inputs.py'}\n")
    output = refused("campaign", str(suite), store=tmp_path, says="entry no_such_problem: problem file ")
    assert "entry no_get_inputs: problem file" in output and "defines no function get_inputs()" in output
    assert not prefect_starts and no_prefect(tmp_path)


def test_a_broken_entry_among_good_ones_is_named_and_left_to_the_campaign(tmp_path: Path):
    from kernelflow import preflight
    from kernelflow.flows.suite import load_suite

    suite = tmp_path / "x.yaml"
    suite.write_text("name: x\ndevice: cpu\nproblems:\n  - 09_silu\n  - no_such_problem\n")
    with pytest.warns(preflight.BrokenEntry, match="entry no_such_problem: problem file .*: no such file"):
        preflight.suite(load_suite(suite), str(tmp_path / "store"), here=True)


def test_read_commands_refuse_a_store_that_is_not_there(tmp_path: Path):
    missing = tmp_path / "typo"
    for args in (["show"], ["report"], ["flush"], ["export", "09_silu", "--out", str(tmp_path / "pkg")]):
        refused(*args, "--store", str(missing), store=tmp_path, says=f"--store {missing}: no such store")
    assert not missing.exists()  # not made by looking
    refused("report", "--out", str(tmp_path / "no" / "r.html"), store=tmp_path, says="--out ")
    (tmp_path / "file").write_text("")
    refused("verify", SILU, GOOD, "--store", str(tmp_path / "file"), store=tmp_path, says="not a directory")


def test_an_s3_store_whose_endpoint_does_not_answer_is_named(tmp_path: Path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{sock.getsockname()[1]}"
    refused("show", "--store", "s3://bucket/p", store=tmp_path, AWS_ENDPOINT_URL=endpoint, AWS_ACCESS_KEY_ID="a",
            AWS_SECRET_ACCESS_KEY="b", KERNELFLOW_STORE_LOCAL=str(tmp_path / "local"),
            says="store s3://bucket/p cannot be reached (list: EndpointConnectionError")


def test_deploy_names_its_file_and_the_missing_prefect_api(tmp_path: Path):
    refused("deploy", "--prefect-file", str(tmp_path / "nope.yaml"), store=tmp_path, says="--prefect-file ")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        api = f"http://127.0.0.1:{sock.getsockname()[1]}/api"
    refused("deploy", store=tmp_path, PREFECT_API_URL=api, says=f"the Prefect API at {api} (PREFECT_API_URL) does "
            "not answer", fresh=True)


def test_debug_shows_the_traceback(tmp_path: Path):
    """--debug, before or after the command, or KERNELFLOW_DEBUG=1: the error is raised out of main, so the
    interpreter prints its traceback (shown once, in a fresh interpreter) and exits 1."""
    from kernelflow.stages.errors import ProblemError

    missing = str(tmp_path / "missing.py")
    for args, env in ((["--debug", "verify", missing, GOOD], {}), (["verify", missing, GOOD, "--debug"], {}),
                      (["verify", missing, GOOD], {"KERNELFLOW_DEBUG": "1"})):
        with pytest.raises(ProblemError, match="problem file"):
            kf_main(*args, store=tmp_path, **env)
    status, output = kf("verify", missing, GOOD, store=tmp_path, KERNELFLOW_DEBUG="1")
    assert status == 1 and "Traceback" in output and "ProblemError: problem file" in output, output


def test_an_unexpected_error_is_its_type_and_message_with_the_way_to_the_traceback(monkeypatch, capsys):
    from kernelflow import cli

    def boom(args):
        raise RuntimeError("the disk caught fire")

    monkeypatch.setattr(cli, "cmd_show", boom)
    monkeypatch.delenv("KERNELFLOW_DEBUG", raising=False)
    assert cli.main(["show"]) == 1
    assert capsys.readouterr().err == ("kernelflow: error: RuntimeError: the disk caught fire (run with --debug for "
                                       "the traceback)\n")
    with pytest.raises(RuntimeError, match="caught fire"):
        cli.main(["--debug", "show"])
