"""The command line, as a user runs it."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
ADV = ROOT / "tests" / "fixtures" / "adversarial"


def kf(*args: str, store: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelflow.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={"KERNELFLOW_STORE": str(store), "PATH": "/usr/bin:/bin:/usr/local/bin"}, timeout=300)


def test_validate_names_the_broken_file(tmp_path: Path):
    out = kf("problems", "validate", "problems/01_softmax.py", "tests/fixtures/broken_problems/no_model.py",
             store=tmp_path)
    assert out.returncode == 1 and "ok      problems/01_softmax.py" in out.stdout
    assert "BROKEN  problem file" in out.stdout and "no_model.py: defines no class Model" in out.stdout
    assert out.stdout.splitlines()[-1] == "2 files: 1 ok, 1 broken"


def torch_compute_softmax(tmp_path: Path) -> str:
    """01_softmax with a POLICY that lets torch ops compute: the fixtures are plain-PyTorch candidates."""
    path = tmp_path / "problems" / "01_softmax.py"
    path.parent.mkdir()
    path.write_text((ROOT / "problems" / "01_softmax.py").read_text() + '\nPOLICY = {"allow_torch_compute": True}\n')
    return str(path)


def test_verify_accepts_good_and_rejects_with_reason(tmp_path: Path):
    problem = torch_compute_softmax(tmp_path)
    good = kf("verify", problem, str(ADV / "good.py"), "--device", "cpu", store=tmp_path)
    assert good.returncode == 0 and "VERIFIED" in good.stdout, good.stdout + good.stderr
    bad = kf("verify", problem, str(ADV / "input_mutation.py"), "--device", "cpu", store=tmp_path)
    assert bad.returncode == 1 and "input_mutation" in bad.stdout and "REJECTED" in bad.stderr
    torch_math = kf("verify", "problems/01_softmax.py", str(ADV / "good.py"), "--device", "cpu", store=tmp_path)
    assert torch_math.returncode == 1 and "policy_violation" in torch_math.stdout and "aten.exp x1" in torch_math.stdout


def test_bench_prints_timings_labelled_cpu(tmp_path: Path):
    out = kf("bench", torch_compute_softmax(tmp_path), str(ADV / "good.py"), "--device", "cpu", store=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "CPU (not comparable with GPU numbers)" in out.stdout
    assert re.search(r"^speedup vs eager \d[\d.]*x, vs torch.compile not timed$", out.stdout, re.M), out.stdout
    assert (tmp_path / "tables" / "timings").is_dir() and (tmp_path / "tables" / "baselines").is_dir()


def test_cuda_candidate_on_cpu_is_refused_with_reason(tmp_path: Path):
    relu = ROOT / "tests" / "fixtures" / "candidates" / "cuda_relu.py"
    out = kf("verify", "problems/09_silu.py", str(relu), "--device", "cpu", store=tmp_path)
    assert out.returncode == 1 and "compile  ok" in out.stdout and "unavailable: CUDA C++ candidates run only on a GPU" in out.stdout


def test_roofline_prints_floor_and_class(tmp_path: Path):
    out = kf("problems", "roofline", "problems/01_softmax.py", "problems/10_matmul_bf16.py", store=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "01_softmax" in out.stdout and "memory" in out.stdout and "compute" in out.stdout
    assert "10_matmul_bf16               gpu0         1.10k     1.10k" in out.stdout, out.stdout
    unknown = kf("problems", "roofline", "problems/01_softmax.py", "--gpu", "Some GPU", store=tmp_path)
    assert unknown.returncode == 1 and "no ceilings known" in unknown.stderr


def test_policy_overrides_parse_and_unknown_fields_are_refused():
    from kernelflow.cli import _policy

    assert _policy(["allow_vendor_libraries=false", "allow_tf32=TRUE"]) == {"allow_vendor_libraries": False,
                                                                            "allow_tf32": True}
    assert _policy(["conv_tf32=false"]) == {"conv_tf32": False}
    assert _policy(None) is None
    with pytest.raises(SystemExit, match="allow_everything"):
        _policy(["allow_everything=true"])


def test_optimize_takes_the_families_as_a_comma_list():
    from kernelflow.cli import parser, run_config

    args = parser().parse_args(["optimize", "problems/09_silu.py", "--families", "elementwise,inductor"])
    assert run_config(args).families == ["elementwise", "inductor"]
    assert run_config(parser().parse_args(["optimize", "problems/09_silu.py"])).families is None

def test_a_fresh_prefect_home_is_created_with_its_parents(tmp_path: Path, monkeypatch):
    """`make demo` on a fresh clone points PREFECT_HOME at .kernelflow/prefect, which does not exist yet; Prefect
    itself creates only the last level and then cannot open its database."""
    from kernelflow.cli import main

    home = tmp_path / "fresh" / ".kernelflow" / "prefect"
    monkeypatch.setenv("PREFECT_HOME", str(home))
    assert main(["problems", "validate", str(ROOT / "problems" / "09_silu.py")]) == 0 and home.is_dir()


def test_kernelflow_sets_its_prefect_defaults_where_the_user_has_not(tmp_path: Path):
    """Prefect's home beside the default store, analytics off, task state lines quiet; a user's own value stands."""
    from kernelflow.cli import kernelflow_defaults

    defaults = kernelflow_defaults({}, tmp_path)
    assert defaults["PREFECT_HOME"] == str(tmp_path / ".kernelflow" / "prefect")
    assert defaults["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    assert defaults["PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL"] == "WARNING"
    assert "PREFECT_HOME" not in kernelflow_defaults({"PREFECT_HOME": "/elsewhere"}, tmp_path)


def test_the_cli_without_make_runs_prefect_in_the_working_directorys_home(tmp_path: Path):
    """`kernelflow ...` in a clean environment: the Prefect it imports has its home in <cwd>/.kernelflow/prefect, as
    under `make`, so `PREFECT_HOME=.kernelflow/prefect prefect server start` shows its runs."""
    script = ("import sys; from kernelflow import cli; cli.cmd_validate = lambda a: print("
              "__import__('prefect.settings').settings.get_current_settings().home) or 0; sys.exit(cli.main("
              "['problems', 'validate', 'x']))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and out.stdout.strip() == str(tmp_path / ".kernelflow" / "prefect"), out.stderr


def test_the_local_prefect_server_may_take_longer_to_start_than_prefects_default(monkeypatch):
    """A new database is migrated on the first start: that outlasted Prefect's 20 s once in a fresh clone."""
    from kernelflow.cli import EPHEMERAL_STARTUP_S, main

    key = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
    monkeypatch.delenv(key, raising=False)
    assert main(["problems", "validate", str(ROOT / "problems" / "09_silu.py")]) == 0
    assert os.environ[key] == str(EPHEMERAL_STARTUP_S) == "120"
    monkeypatch.setenv(key, "45")  # the user's own value stands
    main(["problems", "validate", str(ROOT / "problems" / "09_silu.py")])
    assert os.environ[key] == "45"
