"""The docker executor: stage calls in real containers on a real engine (CPU), and the engine's failure paths on a
fake docker client.

The container tests need a Docker engine and the image `make image-cpu` builds from this checkout
(KERNELFLOW_TEST_IMAGE, default kernelflow-cpu). Without them they skip with the command that provides them, except
under CI (CI=true), where .ci/run provides both and their absence fails.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest
import requests

from kernelflow.artifacts.blobs import put_bytes
from kernelflow.cli import main as cli
from kernelflow.cli import parser
from kernelflow.flows.config import RunConfig
from kernelflow.stages import generate
from kernelflow.stages.contracts import Candidate, CompileRequest, GenerateRequest, Origin, VerifyRequest
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors import docker as docker_executor
from kernelflow.stages.executors.docker import FINGERPRINT_LABEL, FINGERPRINTED, Docker, code_fingerprint
from kernelflow.stages.executors.marks import OWNER_LABEL, owner
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.executors.sandbox import descendants
from tests.evading import evading
from tests.stages.test_verify import EXPECTED, FIXTURES, SOFTMAX, TORCH_COMPUTE, verify

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[3]
IMAGE = os.environ.get("KERNELFLOW_TEST_IMAGE", "kernelflow-cpu")
DOCKER = Docker(image=IMAGE, mem_limit="2g", tmp_size="1g")


def _engine_missing() -> str | None:
    try:
        client = docker.from_env()
        client.ping()
    except docker.errors.DockerException as e:
        return f"no Docker engine ({e}): `make docker-engine` starts one"
    try:
        labels = client.images.get(IMAGE).attrs["Config"]["Labels"] or {}
    except docker.errors.ImageNotFound:
        return f"no image {IMAGE}: `make base-image image-cpu CPU_BASE=kernelflow-base:bookworm` builds it"
    if labels.get(FINGERPRINT_LABEL) != code_fingerprint():
        return f"image {IMAGE} carries other stage code than this checkout: `make image-cpu ...` rebuilds it"
    return None


@pytest.fixture(scope="module")
def engine():
    if missing := _engine_missing():
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the docker executor's tests on a real engine: {missing}")
        pytest.skip(missing)
    return docker.from_env()


def stage_containers(client) -> list:
    return client.containers.list(all=True, filters={"label": "org.kernelflow.stage"})


def candidate(source: str, backend: str = "torch") -> Candidate:
    return Candidate.make(SOFTMAX.id, backend, source, Origin(kind="user", proposer="test"))


def verify_request(tmp_path: Path, source: str, **kw) -> VerifyRequest:
    return VerifyRequest(workdir=str(tmp_path / "work"), problem=SOFTMAX,
                         candidate=candidate(source), policy=TORCH_COMPUTE, **{"timeout_s": 120, **kw})


# --- with a real engine ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_adversarial_verdict_is_the_same_in_a_container(engine, name: str, tmp_path: Path):
    result = verify(name, tmp_path, DOCKER)  # type: ignore[arg-type]
    assert (result.status, result.failure_kind) == (("ok", None) if EXPECTED[name] is None else ("failed", EXPECTED[name])), result.message
    assert (tmp_path / "work" / result.files["stage_log"]).is_file()


def test_a_hang_is_killed_at_the_deadline_and_its_container_removed(engine, tmp_path: Path):
    started = time.perf_counter()
    result = run_stage("verify", verify_request(tmp_path, (FIXTURES / "hang.py").read_text(), timeout_s=5), DOCKER)
    assert (result.status, result.failure_kind) == ("failed", "timeout") and "5 s deadline" in result.message
    assert time.perf_counter() - started < 20 and stage_containers(engine) == []


def test_the_memory_limit_kills_with_an_oom_verdict(engine, tmp_path: Path):
    hog = (FIXTURES / "good.py").read_text() + "\nimport torch\nHOG = [torch.ones(2**26) for _ in range(40)]\n"
    result = run_stage("verify", verify_request(tmp_path, hog), DOCKER.model_copy(update={"mem_limit": "512m"}))
    assert (result.status, result.failure_kind) == ("failed", "oom") and "512m" in result.message


PROBE = '''
import errno, json, os, pathlib, socket
out = {"uid": os.getuid(), "env": dict(os.environ), "interfaces": [n for _, n in socket.if_nameindex()],
       "store_seen": pathlib.Path(STORE).exists(),
       "root_mount": next(line for line in open("/proc/self/mounts") if line.split()[1] == "/")}
try:
    pathlib.Path("/probe").write_text("x")
except OSError as e:
    out["root_write"] = errno.errorcode[e.errno]
pathlib.Path("/tmp/probe").write_text("x")
cg = pathlib.Path("/sys/fs/cgroup")
out["mem_max"] = next((p.read_text().strip() for p in (cg / "memory/memory.limit_in_bytes", cg / "memory.max")
                       if p.exists()), None)
out["pids_max"] = next((p.read_text().strip() for p in (cg / "pids/pids.max", cg / "pids.max") if p.exists()), None)
pathlib.Path("probe.json").write_text(json.dumps(out))
'''


def test_the_container_is_a_sandbox(engine, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "must-not-leak-either")
    monkeypatch.setenv("KERNELFLOW_CODE_VERSION", "test-version")
    put_bytes(tmp_path / "store" / "blobs", b"another candidate's artifact")
    source = (FIXTURES / "good.py").read_text() + evading(PROBE.replace("STORE", repr(str(tmp_path / "store"))))
    result = run_stage("verify", verify_request(tmp_path, source),
                       DOCKER.model_copy(update={"mem_limit": "1g", "pids_limit": 321}))
    assert result.status == "ok", result.message
    probe = json.loads((tmp_path / "work" / "probe.json").read_text())
    assert probe["uid"] != 0 and probe["uid"] == (10001 if os.getuid() == 0 else os.getuid())
    assert "must-not-leak" not in json.dumps(probe["env"]) and probe["env"]["KERNELFLOW_CODE_VERSION"] == "test-version"
    assert probe["interfaces"] == ["lo"]  # network none: loopback only, no route anywhere
    assert probe["root_write"] == "EROFS" and " ro," in probe["root_mount"]
    assert (probe["mem_max"], probe["pids_max"]) == (str(2**30), "321")
    assert probe["store_seen"] is False  # the call's work directory only: the store is out of reach


def test_a_triton_candidate_compiles_and_verifies_in_containers(engine, tmp_path: Path):
    triton = generate.run(GenerateRequest(problem=SOFTMAX, n=1, backend="triton", device="cpu")).candidates[0]
    common = dict(problem=SOFTMAX, candidate=triton)
    compiled = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), **common), DOCKER)
    assert compiled.status == "ok", compiled.message
    cubins = [path for name, path in compiled.files.items() if name.startswith("cubin:")]
    assert cubins and all((tmp_path / "compile" / path).read_bytes()[:4] == b"\x7fELF" for path in cubins)
    checked = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "verify"), device="cpu", **common), DOCKER)
    assert (checked.status, checked.failure_kind) == ("ok", None), checked.message


def test_the_container_reads_the_problem_as_the_request_carries_it(engine, tmp_path: Path):
    broken = SOFTMAX.model_copy(update={"source": "raise RuntimeError('the problem text of the request')\n"})
    request = verify_request(tmp_path, (FIXTURES / "good.py").read_text()).model_copy(update={"problem": broken})
    with pytest.raises(InfrastructureError, match="the problem text of the request"):
        run_stage("verify", request, DOCKER)


def test_a_stale_image_is_refused(engine, tmp_path: Path, monkeypatch):
    monkeypatch.setattr(docker_executor, "_own_fingerprint", lambda: "other code")
    with pytest.raises(InfrastructureError, match="other stage code than this checkout"):
        run_stage("verify", verify_request(tmp_path, (FIXTURES / "good.py").read_text()), DOCKER)


def test_the_cli_verifies_through_the_docker_executor(engine, tmp_path: Path, capsys):
    triton = generate.run(GenerateRequest(problem=SOFTMAX, n=1, backend="triton", device="cpu")).candidates[0]
    (tmp_path / "candidate.py").write_text(triton.source)
    code = cli(["verify", SOFTMAX.path, str(tmp_path / "candidate.py"), "--device", "cpu", "--store",
                str(tmp_path / "store"), "--executor", "docker", "--image", IMAGE])
    assert code == 0 and "VERIFIED" in capsys.readouterr().out
    logs = list((tmp_path / "store").rglob("verify.log"))
    assert logs and stage_containers(engine) == []


def test_the_optimize_flow_runs_its_stages_in_containers(engine, request, tmp_path: Path):
    from kernelflow.flows.optimize import optimize

    request.getfixturevalue("prefect_harness")  # session-scoped: asked for here, it starts only with an engine

    summary = optimize(str(ROOT / "problems" / "17_elementwise_chain.py"), RunConfig(
        budget=1, store=str(tmp_path), device="cpu", executor="docker", image=DOCKER.image))
    assert summary["best_candidate_id"], summary
    requests_seen = {p.name for p in tmp_path.rglob("*.request.json")}
    assert {"compile.request.json", "verify.request.json", "benchmark.request.json"} <= requests_seen
    assert all(json.loads(p.read_text())["problem"]["path"].startswith(docker_executor.PROBLEM_DIR)
               for p in tmp_path.rglob("verify.request.json"))  # what only the docker executor writes


# --- a caller killed: its containers end too (stages/executors/owner_guard.py) ---------------------------------------

HOLDER = """
import sys
from pathlib import Path
from kernelflow.stages.contracts import StageRequest
from kernelflow.stages.executors import docker as d
work = Path(sys.argv[1])
d._run(d._client(), ["sh", "-c", "sleep 600"], StageRequest(workdir=str(work), timeout_s=600),
       d.Docker(image=sys.argv[2]), "65534:65534", [], work / "log")
"""


@pytest.fixture(scope="module")
def any_engine():
    """An engine and IMAGE, whatever stage code it carries: these containers run `sleep`."""
    try:
        client = docker.from_env()
        client.images.get(IMAGE)
    except docker.errors.DockerException as e:
        if os.environ.get("CI"):
            pytest.fail(f"CI runs the docker executor's tests on a real engine: {e}")
        pytest.skip(f"no Docker engine or no image {IMAGE}: {e}")
    return client


def holding(tmp_path: Path, client, started: list[subprocess.Popen]) -> tuple[subprocess.Popen, list[int]]:
    """A process in the middle of a stage call (a container running `sleep`), added to `started`; (it, its guard's
    pid, if any)."""
    (tmp_path / "work").mkdir(parents=True)
    started.append(proc := subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "work"), IMAGE], cwd=ROOT))
    deadline = time.monotonic() + 60
    while not [c for c in owned(client, proc.pid) if c.status == "running"]:
        assert proc.poll() is None and time.monotonic() < deadline, "no container started"
        time.sleep(0.2)
    return proc, [pid for pid in descendants(proc.pid) if b"owner_guard" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def owned(client, pid: int) -> list:
    return [c for c in client.containers.list(all=True, filters={"label": OWNER_LABEL}, ignore_removed=True)
            if c.labels[OWNER_LABEL].split(":")[1] == str(pid)]


def gone(client, pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while owned(client, pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not owned(client, pid)


def test_a_sigkilled_caller_leaves_no_container_and_a_killed_guard_is_made_up_by_the_next(any_engine, tmp_path: Path):
    started: list[subprocess.Popen] = []
    try:
        proc, _ = holding(tmp_path / "a", any_engine, started)
        proc.kill()
        proc.wait()
        assert gone(any_engine, proc.pid, within_s=10), "the container outlived the SIGKILLed process that started it"

        orphan, guards = holding(tmp_path / "b", any_engine, started)
        for guard in guards:  # killed with its owner, as when every process of a machine is
            os.kill(guard, signal.SIGKILL)
        orphan.kill()
        orphan.wait()
        time.sleep(1)
        assert [c.status for c in owned(any_engine, orphan.pid)] == ["running"]
        holding(tmp_path / "c", any_engine, started)  # the next caller's guard removes it
        assert gone(any_engine, orphan.pid, within_s=10), "a container whose owner had ended was left running"
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
            for container in owned(any_engine, proc.pid):  # what a failing check left
                with contextlib.suppress(docker.errors.NotFound):  # its guard was quicker
                    container.remove(force=True)


# --- without an engine ----------------------------------------------------------------------------------------------


def test_the_fingerprint_covers_everything_a_stage_process_imports():
    script = ("import importlib, pkgutil, sys, kernelflow.stages as s\n"
              "for m in pkgutil.walk_packages(s.__path__, 'kernelflow.stages.'): importlib.import_module(m.name)\n"
              "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() if n.split('.')[0] == 'kernelflow' "
              "and not n.startswith('kernelflow.stages'))))")
    loaded = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    package = ROOT / "kernelflow"
    covered = [e for e in FINGERPRINTED if not (package / e).is_dir()]
    assert sorted(str(Path(f).relative_to(package)) for f in loaded.stdout.split()) == sorted(covered)


def test_the_cli_builds_the_docker_executor_from_its_options():
    from kernelflow.cli import _executor

    assert _executor(parser().parse_args(["optimize", "p.py", "--executor", "docker", "--image", "x"])) == \
        Docker(image="x")
    assert _executor(parser().parse_args(["verify", "p.py", "c.py"])) == "subprocess"
    with pytest.raises(SystemExit, match="needs --image"):
        _executor(parser().parse_args(["bench", "p.py", "c.py", "--executor", "docker"]))


class FakeContainer:
    """What the executor calls on a container; `fail` names the call that raises, as the engine would."""

    def __init__(self, fail: dict[str, Exception]):
        self.id, self.fail, self.calls = "f" * 64, fail, []
        self.attrs = {"State": {"OOMKilled": False}}

    def _call(self, name: str, result=None):
        self.calls.append(name)
        if name in self.fail:
            raise self.fail[name]
        return result

    def start(self):
        return self._call("start")

    def wait(self, timeout):
        return self._call("wait", {"StatusCode": 0})

    def kill(self):
        return self._call("kill")

    def logs(self, stdout, stderr):
        return self._call("logs", b"")

    def reload(self):
        return self._call("reload")

    def remove(self, force):
        return self._call(f"remove(force={force})")


class FakeClient:
    def __init__(self, container: FakeContainer, user: str = "10001:10001", fingerprint: str | None = None):
        self.container, self.created = container, {}
        labels = {FINGERPRINT_LABEL: fingerprint or docker_executor._own_fingerprint()}
        image = type("Image", (), {"attrs": {"Config": {"User": user, "Labels": labels}}})()
        self.images = type("Images", (), {"get": lambda _, name: image if name == IMAGE else self._missing(name)})()
        self.containers = type("Containers", (), {"create": self._create})()

    def close(self):
        pass

    @staticmethod
    def _missing(name: str):
        raise docker.errors.ImageNotFound(f"No such image: {name}")

    def _create(self, image, command, **kw):
        self.created = dict(image=image, command=command, **kw)
        return self.container


@pytest.fixture
def fake(monkeypatch):
    def install(fail: dict[str, Exception] | None = None, **kw) -> FakeClient:
        client = FakeClient(FakeContainer(fail or {}), **kw)
        monkeypatch.setattr(docker_executor, "_client", lambda: client)
        return client
    return install


def test_the_container_is_created_locked_down(fake, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-must-not-leak")
    client = fake()
    run_stage("verify", verify_request(tmp_path, "x = 1"), DOCKER)  # no result file: a crash row, as expected
    kw = client.created
    assert kw["network_mode"] == "none" and kw["read_only"] is True and kw["cap_drop"] == ["ALL"]
    assert (kw["mem_limit"], kw["pids_limit"], kw["device_requests"]) == ("2g", 4096, None)  # CPU: no GPU
    assert "OPENAI_API_KEY" not in kw["environment"] and kw["environment"]["TRITON_INTERPRET"] == "1"
    assert kw["command"][:3] == ["python", "-m", "kernelflow.stages.verify"] and list(kw["tmpfs"]) == ["/tmp"]
    assert kw["labels"][OWNER_LABEL] == owner()  # what its guard removes when this process ends
    assert client.container.calls == ["start", "wait", "logs", "reload", "remove(force=True)"]


def test_a_cuda_request_gets_the_gpus_and_compile_never_does(fake, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    client = fake()
    run_stage("verify", verify_request(tmp_path, "x = 1", device="cuda"), DOCKER)
    (gpus,) = client.created["device_requests"]
    assert (gpus["DeviceIDs"], gpus["Capabilities"]) == (["2", "3"], [["gpu"]])
    assert "TRITON_INTERPRET" not in client.created["environment"]
    run_stage("compile", CompileRequest(workdir=str(tmp_path / "c"), candidate=candidate("x = 1")), DOCKER)
    assert client.created["device_requests"] is None


def test_an_engine_failure_is_an_infrastructure_error_and_the_container_is_removed(fake, tmp_path: Path):
    client = fake({"start": docker.errors.APIError("cannot start: no such runtime")})
    with pytest.raises(InfrastructureError, match="no such runtime"):
        run_stage("verify", verify_request(tmp_path, "x = 1"), DOCKER)
    assert client.container.calls == ["start", "remove(force=True)"]


def test_an_engine_lost_before_the_deadline_is_not_a_timeout(fake, tmp_path: Path):
    client = fake({"wait": requests.exceptions.ConnectionError("engine went away")})
    with pytest.raises(InfrastructureError, match="engine went away"):
        run_stage("verify", verify_request(tmp_path, "x = 1", timeout_s=600), DOCKER)
    assert client.container.calls == ["start", "wait", "remove(force=True)"]


@pytest.mark.parametrize(("kw", "image", "match"), [
    ({}, "no-such-image", "make images"),
    ({"user": ""}, IMAGE, "runs as root"),
    ({"user": "0:0"}, IMAGE, "runs as root"),
    ({"fingerprint": "old"}, IMAGE, "other stage code"),
])
def test_an_unusable_image_is_refused_before_any_container(fake, tmp_path: Path, kw, image, match):
    client = fake(**kw)
    with pytest.raises(InfrastructureError, match=match):
        run_stage("verify", verify_request(tmp_path, "x = 1"), Docker(image=image))
    assert client.created == {}
