"""The subprocess executor's sandbox (stages/executors/sandbox.py), seen from inside: probes run as candidate code in a stage
process (tests/sandbox_stage.py: no static checks, no audit hook, as for a candidate that evades them) and report what
they could do. Network isolation needs unprivileged user namespaces; where this machine has none, the network test
checks that the record says so, then skips."""

import dataclasses
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelflow.stages.contracts import Candidate, Origin, StageRequest, VerifyRequest
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors import landlock, sandbox
from kernelflow.stages.executors import run as executor
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.executors.sandbox import Probe, Sandbox
from tests.evading import evading
from tests.sandbox_stage import ProbeRequest
from tests.stages.test_verify import FIXTURES, SOFTMAX, TORCH_COMPUTE

FEATURES = {"environment", "temp_dir", "home", "files", "cpu_time", "file_size", "core_dumps", "processes", "memory",
            "resident_memory", "network"}


@pytest.fixture(autouse=True)
def probe_stage(monkeypatch):
    monkeypatch.setitem(executor.STAGES, "probe", "tests.sandbox_stage")


def run_probe(tmp_path: Path, code: str, mode: Sandbox | str = "subprocess", **request):
    req = ProbeRequest(workdir=str(tmp_path / "work"), code=code, **request)
    result = run_stage("probe", req, mode)
    return result, (json.loads(result.message) if result.status == "ok" else None)


@pytest.fixture
def server():
    """A TCP server on the host's loopback: a probe in its own network namespace must not reach it."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        s.settimeout(0.5)
        yield s


ENV_TMP_NET = '''
import errno, os, socket, subprocess, tempfile
out["secret"] = os.environ.get("OPENAI_API_KEY")
out["child_env"] = subprocess.run(["sh", "-c", "env"], capture_output=True, text=True).stdout
out["tmp"] = tempfile.gettempdir()
with tempfile.NamedTemporaryFile(delete=False) as f:
    out["tmp_file"] = f.name
out["interfaces"] = sorted(name for _, name in socket.if_nameindex())
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
    out["connect"] = "connected"
except OSError as e:
    out["connect"] = errno.errorcode.get(e.errno, str(e))
'''


def test_a_probe_sees_no_secret_its_own_temp_dir_and_no_network(tmp_path: Path, monkeypatch, server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "must-not-leak-either")
    result, out = run_probe(tmp_path, ENV_TMP_NET.replace("PORT", str(server.getsockname()[1])))
    assert result.status == "ok", result.message
    assert out["secret"] is None and "must-not-leak" not in out["child_env"]
    assert set(result.sandbox) == FEATURES and "AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY" in result.sandbox["environment"]
    temp = tmp_path.resolve() / "work" / "probe.tmp"
    assert out["tmp"] == str(temp) and Path(out["tmp_file"]).parent == temp
    assert not temp.exists()  # removed after the call
    if (why_not := sandbox.probe().why_not) is not None:
        assert result.sandbox["network"] == f"not applied: {why_not}"
        pytest.skip(f"this machine cannot give a process its own network namespace: {why_not}")
    assert result.sandbox["network"].startswith("applied") and out["interfaces"] == ["lo"]
    assert out["connect"] in ("ECONNREFUSED", "ENETUNREACH")
    with pytest.raises(TimeoutError):
        server.accept()  # nothing reached the host's loopback



def test_a_cpu_request_sees_no_gpu(tmp_path: Path):
    """On a GPU host too: CUDA finds no device (without a warning in the stage log) and the candidate cannot reach
    one."""
    code = "import os, torch\nout.update(visible=os.environ['CUDA_VISIBLE_DEVICES'], cuda=torch.cuda.is_available())"
    result, out = run_probe(tmp_path, code, device="cpu")
    assert result.status == "ok" and out == {"visible": "", "cuda": False}, result.message
    assert "cudaGetDeviceCount" not in (tmp_path / "work" / "probe.log").read_text()

CPU_BURN = '''
import subprocess, sys
try:  # in a session of its own, the deadline's kill would miss it: without the limit, the timeout ends it
    child = subprocess.run([sys.executable, "-c", "while True: pass"], start_new_session=True, timeout=60).returncode
except subprocess.TimeoutExpired:
    child = "ran 60 s"
open("child_status", "w").write(str(child))
while True:
    pass
'''


@pytest.mark.slow
def test_burning_cpu_past_the_limit_is_a_timeout_for_the_process_and_its_children(tmp_path: Path):
    started = time.perf_counter()
    result, _ = run_probe(tmp_path, CPU_BURN, Sandbox(cpu_cores=0, cpu_margin_s=3), timeout_s=120)
    assert (result.status, result.failure_kind) == ("failed", "timeout") and "CPU-time limit" in result.message
    assert "RLIMIT_CPU 3 s" in result.message and result.sandbox["cpu_time"].startswith("applied: RLIMIT_CPU 3 s")
    assert (tmp_path / "work" / "child_status").read_text() == str(-24)  # SIGXCPU, in its own session too
    assert time.perf_counter() - started < 100  # the CPU limit, long before the 120 s deadline


BIG_FILES = '''
import errno, subprocess
try:
    with open("big.py.bin", "wb") as f:
        f.write(b"x" * (2 << 20))
    out["python"] = "written"
except OSError as e:
    out["python"] = errno.errorcode[e.errno]
out["child"] = subprocess.run(["sh", "-c", "head -c 2000000 /dev/zero > big.sh.bin"]).returncode
'''


def test_a_file_stops_at_the_size_limit(tmp_path: Path):
    result, out = run_probe(tmp_path, BIG_FILES, Sandbox(file_size_bytes=1 << 20))
    assert result.status == "ok", result.message
    assert out["python"] == "EFBIG" and out["child"] != 0  # Python ignores SIGXFSZ; the shell's child dies of it
    assert [(tmp_path / "work" / f).stat().st_size for f in ("big.py.bin", "big.sh.bin")] == [1 << 20, 1 << 20]


FORK_BOMB = '''
import errno, os, signal, time
kids = []
try:
    for _ in range(400):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        kids.append(pid)
    out["error"] = None
except OSError as e:
    out["error"] = errno.errorcode[e.errno]
out["spawned"] = len(kids)
for pid in kids:
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
'''


def test_a_fork_bomb_is_bounded(tmp_path: Path):
    result, out = run_probe(tmp_path, FORK_BOMB, Sandbox(processes=32))
    assert result.status == "ok", result.message
    note = result.sandbox["processes"]
    if note.startswith("not applied"):
        pytest.skip(f"no process limit here: {note}")
    assert out["error"] == "EAGAIN"
    # in its own user namespace the limit counts the call's tasks alone; per user, it is on top of the uid's others
    assert out["spawned"] < 32 if "own user namespace" in note else out["spawned"] < 400


WRITES = '''
import ctypes, os, subprocess
from pathlib import Path
home = Path.home()
(home / "note").write_text("ok")
out["home"] = str(home)
out["in_work"] = Path("inside.txt").write_text("ok")
def attempt(how, fn):
    try:
        fn()
        out[how] = "written"
    except OSError as e:
        out[how] = e.strerror
attempt("python", lambda: Path("OUTSIDE/python.txt").write_text("x"))
attempt("rename", lambda: os.rename("inside.txt", "OUTSIDE/moved.txt"))
out["libc"] = "written" if ctypes.CDLL(None).open(b"OUTSIDE/libc.txt", os.O_CREAT | os.O_WRONLY, 0o644) >= 0 else "refused"
out["child"] = subprocess.run(["sh", "-c", "echo x > OUTSIDE/child.txt"], capture_output=True).returncode
'''


def test_writes_land_only_in_the_work_dir_and_a_throwaway_home(tmp_path: Path):
    """Prevention, not detection: without any in-process defence, a write beside the work dir fails in Python,
    through libc and from a child process alike (Landlock), and HOME is the call's own."""
    if landlock.abi() == 0:
        result, _ = run_probe(tmp_path, "")
        assert result.sandbox["files"].startswith("not applied: this kernel has no Landlock")
        pytest.skip("this kernel has no Landlock: writes outside the work dir are only detected")
    outside = tmp_path / "outside"
    outside.mkdir()
    result, out = run_probe(tmp_path, WRITES.replace("OUTSIDE", str(outside)))
    assert result.status == "ok", result.message
    assert result.sandbox["files"].startswith("applied: Landlock") and str(tmp_path.resolve() / "work") in \
        result.sandbox["files"]
    assert (out["python"], out["rename"], out["libc"]) == ("Permission denied", "Permission denied", "refused")
    assert out["child"] != 0 and list(outside.iterdir()) == []
    assert out["home"] == str(tmp_path.resolve() / "work" / "probe.home") and not Path(out["home"]).exists()


def test_without_landlock_the_record_says_so_and_required_confinement_fails(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(landlock, "abi", lambda: 0)
    result, _ = run_probe(tmp_path, "")
    assert result.status == "ok" and result.sandbox["files"].startswith("not applied: this kernel has no Landlock")
    with pytest.raises(InfrastructureError, match="file_isolation='required'"):
        run_probe(tmp_path, "", Sandbox(file_isolation="required"))
    off, _ = run_probe(tmp_path, "", Sandbox(file_isolation="off"))
    assert off.sandbox["files"] == "not applied: switched off (file_isolation='off')"


def test_the_address_space_is_limited_on_requests_that_run_no_gpu_code(tmp_path: Path):
    hog = 'try:\n    bytearray(2 << 30)\n    out["alloc"] = "done"\nexcept MemoryError:\n    out["alloc"] = "MemoryError"\n'
    result, out = run_probe(tmp_path, hog, Sandbox(memory_bytes=1 << 30))
    assert out == {"alloc": "MemoryError"} and result.sandbox["memory"] == f"applied: RLIMIT_AS {1 << 30} bytes per process"
    cuda = ProbeRequest(workdir=str(tmp_path / "cuda"), code="", device="cuda")
    record = sandbox.plan(Sandbox(), "probe", cuda, {}, []).record
    assert record["memory"].startswith("not applied: the request's device is cuda")
    compile_like = StageRequest(workdir=str(tmp_path / "compile"))  # no device: a compile
    assert sandbox.plan(Sandbox(), "compile", compile_like, {}, []).record["memory"].startswith("applied: RLIMIT_AS")


def test_without_namespaces_the_record_says_so_and_required_isolation_fails(tmp_path: Path, monkeypatch):
    why = "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted"
    monkeypatch.setattr(sandbox, "probe", lambda: Probe(why, "user", False))
    result, _ = run_probe(tmp_path, "")
    assert result.status == "ok" and result.sandbox["network"] == f"not applied: {why}"
    assert "counted per user" in result.sandbox["processes"]  # the uid's tasks seen at spawn + the allowance
    with pytest.raises(InfrastructureError, match="network_isolation='required'.*Operation not permitted"):
        run_probe(tmp_path, "", Sandbox(network_isolation="required"))
    off, _ = run_probe(tmp_path, "", Sandbox(network_isolation="off"))
    assert off.sandbox["network"] == "not applied: switched off (network_isolation='off')"


def test_the_probe_says_why_when_the_kernel_refuses_a_namespace():
    """In a user namespace that may create no further ones, the probe's child reports the failed step."""
    refuse = "echo 0 > /proc/sys/user/max_user_namespaces && exec \"$0\" -m kernelflow.stages.executors.sandbox"
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-Ur", "true"]).returncode != 0:
        pytest.skip("no `unshare -Ur` here to build a namespace that refuses others")
    root = str(Path(__file__).resolve().parents[3])
    done = subprocess.run(["unshare", "-Ur", "sh", "-c", refuse, sys.executable], capture_output=True, text=True, cwd=root,
                          env=os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))})
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["why_not"].startswith("unshare(CLONE_NEWUSER|CLONE_NEWNET): ")


PROBE_CHILD = '''
import errno, json, os, socket, tempfile
out = {"secret": os.environ.get("OPENAI_API_KEY"), "tmp": tempfile.gettempdir()}
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
    out["connect"] = "connected"
except OSError as e:
    out["connect"] = errno.errorcode.get(e.errno, str(e))
open("probe.json", "w").write(json.dumps(out))
'''


@pytest.mark.slow
def test_a_verify_call_carries_its_sandbox_record(tmp_path: Path, monkeypatch, server):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    source = (FIXTURES / "good.py").read_text() + evading(PROBE_CHILD.replace("PORT", str(server.getsockname()[1])))
    candidate = Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=SOFTMAX,
                            candidate=candidate, policy=TORCH_COMPUTE, timeout_s=120)
    result = run_stage("verify", request, "subprocess")
    assert result.status == "ok", result.message
    probe = json.loads((tmp_path / "work" / "probe.json").read_text())
    assert set(result.sandbox) == FEATURES and result.sandbox["memory"].startswith("applied")  # a cpu request
    assert probe["secret"] is None and probe["tmp"] == str(tmp_path.resolve() / "work" / "verify.tmp")
    assert probe["connect"] != "connected" or sandbox.probe().why_not is not None


PTXAS_LOG = '''
import tempfile as _tf
with _tf.NamedTemporaryFile(mode="w", suffix=".log") as _log:  # what Triton does around ptxas, on a GPU
    _log.write("ptxas info")
'''


@pytest.mark.slow
def test_a_named_log_in_the_stage_temp_dir_is_the_candidates_to_write(tmp_path: Path):
    """The stage's temp dir lies in its work dir, where the harness keeps `<stage>.log`: only that name is the
    harness's. (On the H200 every Triton candidate in a subprocess stage was called a cheat for its ptxas log.)"""
    source = (FIXTURES / "good.py").read_text() + PTXAS_LOG
    candidate = Candidate.make(SOFTMAX.id, "torch", source, Origin(kind="user", proposer="fixture"))
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=SOFTMAX,
                            candidate=candidate, policy=TORCH_COMPUTE, timeout_s=120)
    result = run_stage("verify", request, "subprocess")
    assert result.status == "ok", result.message


def test_a_candidate_cannot_lift_its_limits(tmp_path: Path):
    lift = ('import resource\ntry:\n    resource.setrlimit(resource.RLIMIT_CPU, (resource.RLIM_INFINITY,) * 2)\n'
            '    out["lift"] = "lifted"\nexcept (ValueError, OSError) as e:\n    out["lift"] = type(e).__name__\n')
    result, out = run_probe(tmp_path, lift)
    if result.sandbox["cpu_time"].endswith("root may lift it"):
        pytest.skip("root without a user namespace of its own keeps CAP_SYS_RESOURCE: the record says so")
    assert out["lift"] in ("ValueError", "PermissionError")


def test_a_sandbox_that_cannot_be_entered_is_an_infrastructure_error_that_says_why(tmp_path: Path, monkeypatch):
    """Popen reports a failed preexec_fn without its exception; the child's own line in the log gives the step."""
    real = sandbox.plan

    def unsettable(*args, **kwargs) -> sandbox.Plan:  # a soft limit above its hard one: setrlimit refuses it
        call = real(*args, **kwargs)
        return dataclasses.replace(call, rlimits=(*call.rlimits, (resource.RLIMIT_CORE, 1, 0)))

    monkeypatch.setattr(executor, "plan", unsettable)
    with pytest.raises(InfrastructureError, match=r"could not enter its sandbox \(ValueError: .*limit"):
        run_probe(tmp_path, "")
    assert not (tmp_path / "work" / "probe.tmp").exists()

