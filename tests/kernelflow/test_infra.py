"""infra/: the deployments file, the docker work pool's template and the compose file parse and say what they should;
against a real `prefect server start`, `kernelflow deploy` makes the pool, one queue per GPU (limit 1) and the
deployments, idempotently; `kernelflow serve` serves the campaign on its cron schedule; a campaign dispatched to
the GPU queues runs each problem as a flow run of the optimize deployment, taken by a worker."""

from __future__ import annotations

import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import httpx
import pytest
import yaml
from prefect.utilities.templating import apply_values, find_placeholders

from kernelflow.artifacts.campaigns import campaigns, entries
from kernelflow.artifacts.store import Store
from kernelflow.deploy import NIGHTLY_CRON, load_flow
from kernelflow.flows.dispatch import gpu_of, job_variables
from kernelflow.flows.suite import Dispatch, load_suite
from kernelflow.stages.errors import KernelflowError
from tests.prefect_server import prefect_server, stop

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
CLI = [sys.executable, "-m", "kernelflow.cli"]


def deployments() -> dict[str, dict]:
    return {d["name"]: d for d in yaml.safe_load((INFRA / "prefect.yaml").read_text())["deployments"]}


def test_the_deployments_file_names_real_flows_and_the_nightly_schedule():
    spec, found = deployments(), {}
    for name, d in spec.items():
        flow = load_flow(d["entrypoint"])
        found[f"{flow.name}/{name}"] = d
        assert set(d.get("parameters") or {}) <= set(inspect.signature(flow.fn).parameters), name
        assert d["work_pool"]["name"] == "kernelflow-gpu"
    assert set(found) == {"campaign/nightly", Dispatch().deployment}  # what a campaign sends its runs to
    nightly = spec["nightly"]
    assert nightly["schedules"] == [{"cron": NIGHTLY_CRON, "timezone": "UTC", "active": True}]
    assert nightly["parameters"]["dispatch"] == "deployments" and nightly["work_pool"]["work_queue_name"] == "campaign"
    assert nightly["work_pool"]["job_variables"] == {"device_requests": []}  # the campaign itself needs no GPU
    assert load_suite(nightly["parameters"]["suite_path"]).name == "nightly"  # a path the flow resolves
    pull = yaml.safe_load((INFRA / "prefect.yaml").read_text())["pull"][0]
    checkout = pull["prefect.deployments.steps.set_working_directory"]["directory"]
    volumes = json.loads((INFRA / "work-pool.json").read_text())["variables"]["properties"]["volumes"]["default"]
    assert f"{checkout}:{checkout}:ro" in volumes  # the flow runs start where the template mounts the checkout


def test_the_pool_template_gives_each_run_the_gpu_of_its_queue():
    template = json.loads((INFRA / "work-pool.json").read_text())
    properties = template["variables"]["properties"]
    used = {p.name for p in find_placeholders(json.dumps(template["job_configuration"]))}
    assert used == set(properties)  # every placeholder declared, every variable used
    defaults = {k: v["default"] for k, v in properties.items() if v.get("default") is not None}

    def container(variables: dict) -> dict:  # what the docker worker hands docker-py, as Prefect renders it
        return apply_values(template["job_configuration"], {**defaults, **variables})["container_create_kwargs"]

    one = container(job_variables("docker", "h1-gpu-3"))
    assert one["device_requests"] == [{"driver": "nvidia", "device_ids": ["3"], "capabilities": [["gpu"]]}]
    host = docker.types.HostConfig(version="1.44", **one)
    assert host["DeviceRequests"][0]["DeviceIDs"] == ["3"] and host["ShmSize"] > 0
    assert container({})["device_requests"][0]["count"] == -1  # a run started by hand: every GPU of the host
    assert container(deployments()["nightly"]["work_pool"]["job_variables"])["device_requests"] == []
    assert job_variables("process", "gpu-1") == {}  # a process worker pins its GPU with CUDA_VISIBLE_DEVICES
    assert [gpu_of(q) for q in ("gpu-0", "h2-gpu-7")] == [0, 7]
    with pytest.raises(KernelflowError, match="names no GPU"):
        gpu_of("campaign")


def test_the_compose_file_runs_server_postgres_minio_and_gpu_workers(tmp_path: Path):
    compose = yaml.safe_load((INFRA / "compose.yaml").read_text())
    services = compose["services"]
    assert {"postgres", "prefect-server", "minio", "minio-bucket", "worker"} <= set(services)
    server = services["prefect-server"]
    assert server["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"].startswith("postgresql+asyncpg://prefect:")
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    worker = services["worker"]
    assert "/var/run/docker.sock:/var/run/docker.sock" in worker["volumes"]
    assert "--pool kernelflow-gpu --type docker" in worker["command"][-1]
    for service in services.values():  # passwords come from the environment, never from the file
        env = service.get("environment") or {}
        assert all(str(v).startswith("${") for k, v in env.items() if "PASSWORD" in k)
    if shutil.which("docker") is None or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode:
        pytest.skip("no `docker compose` here (the docker CLI without its compose plugin): parsed only")
    env = {**os.environ, "POSTGRES_PASSWORD": "pg-test", "MINIO_ROOT_PASSWORD": "minio-test",
           "KERNELFLOW_QUEUES": "gpu-0 gpu-1"}
    out = subprocess.run(["docker", "compose", "-f", str(INFRA / "compose.yaml"), "--profile", "server", "--profile",
                          "worker", "config", "--format", "json"], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert "pg-test@postgres:5432" in config["services"]["prefect-server"]["environment"][
        "PREFECT_API_DATABASE_CONNECTION_URL"]
    refused = subprocess.run(["docker", "compose", "-f", str(INFRA / "compose.yaml"), "--profile", "server", "config"],
                             env={k: v for k, v in env.items() if k != "POSTGRES_PASSWORD"}, capture_output=True,
                             text=True, cwd=tmp_path)
    assert refused.returncode != 0 and "POSTGRES_PASSWORD" in refused.stderr


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[tuple[str, dict[str, str]]]:
    with prefect_server(tmp_path_factory.mktemp("prefect-home")) as running:
        yield running


def cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def test_deploy_makes_the_pool_its_gpu_queues_and_the_deployments(server):
    base, env = server
    for _ in range(2):  # a second deploy updates, duplicates nothing
        done = cli(["deploy", "--gpus", "2"], env)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "queues campaign, gpu-0, gpu-1" in done.stdout
    api = httpx.Client(base_url=f"{base}/api", timeout=30)
    pool = api.get("/work_pools/kernelflow-gpu").json()
    assert pool["type"] == "docker" and pool["base_job_template"] == json.loads((INFRA / "work-pool.json").read_text())
    queues = {q["name"]: q["concurrency_limit"] for q in api.post("/work_pools/kernelflow-gpu/queues/filter").json()}
    assert {k: v for k, v in queues.items() if k != "default"} == {"campaign": 1, "gpu-0": 1, "gpu-1": 1}
    nightly = api.get("/deployments/name/campaign/nightly").json()
    assert [s["schedule"]["cron"] for s in nightly["schedules"]] == [NIGHTLY_CRON]
    assert nightly["work_queue_name"] == "campaign" and nightly["job_variables"] == {"device_requests": []}
    assert nightly["pull_steps"][0]["prefect.deployments.steps.set_working_directory"]["directory"] == "/srv/kernelflow"
    gpu = api.get("/deployments/name/optimize/gpu").json()
    assert "problem_path" in gpu["parameter_openapi_schema"]["properties"] and gpu["work_pool_name"] == "kernelflow-gpu"


def test_serve_registers_the_campaign_on_its_schedule(server, tmp_path: Path):
    base, env = server
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([*CLI, "serve", str(ROOT / "suites" / "nightly.yaml"), "--name", "served-nightly", "--cron",
                             "30 3 * * *"], env=env, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while (found := httpx.get(f"{base}/api/deployments/name/campaign/served-nightly")).status_code != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        stop(proc)
    deployment = found.json()
    assert [s["schedule"]["cron"] for s in deployment["schedules"]] == ["30 3 * * *"]
    assert deployment["parameters"] == {"suite_path": str(ROOT / "suites" / "nightly.yaml")}


REMOTE_SUITE = """
name: remote
device: cpu
executor: inline
regression_floor: 0.5
defaults: {{budget: 1, profile: false, families: [elementwise]}}
problems:
  - 09_silu
  - {{problem: {broken}, name: broken}}
  - 17_elementwise_chain
dispatch: {{mode: local, work_pool: kf-process, poll_s: 1, run_timeout_s: 240}}
"""


def test_a_campaign_sends_its_problems_to_the_gpu_queues(server, tmp_path: Path):
    """A process pool stands in for the docker one (no engine here): same queues, same deployments, a real worker."""
    base, env = server
    spec = yaml.safe_load((INFRA / "prefect.yaml").read_text())
    for d in spec["deployments"]:
        d["work_pool"]["name"] = "kf-process"
        d.pop("schedules", None)
    (tmp_path / "prefect.yaml").write_text(yaml.safe_dump(spec))
    done = cli(["deploy", "--pool-type", "process", "--prefect-file", str(tmp_path / "prefect.yaml"), "--gpus", "2",
                "--workdir", str(ROOT)], env)
    assert done.returncode == 0, done.stderr[-3000:]
    worker_env = {**env, "TRITON_INTERPRET": "1", "PREFECT_WORKER_QUERY_SECONDS": "1"}
    worker = subprocess.Popen([sys.executable, "-m", "prefect", "worker", "start", "--pool", "kf-process", "--type",
                               "process", "--work-queue", "gpu-0", "--work-queue", "gpu-1"], env=worker_env, cwd=ROOT,
                              stdout=(tmp_path / "worker.log").open("wb"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    broken = ROOT / "tests" / "fixtures" / "broken_problems" / "import_error.py"
    (tmp_path / "suite.yaml").write_text(REMOTE_SUITE.format(broken=broken))
    try:
        ran = cli(["campaign", str(tmp_path / "suite.yaml"), "--store", str(tmp_path / "store"), "--dispatch",
                   "deployments"], worker_env)
    finally:
        stop(worker)
    assert ran.returncode == 1, ran.stdout[-3000:] + ran.stderr[-3000:] + (tmp_path / "worker.log").read_text()[-3000:]
    store = Store(tmp_path / "store")
    rows = entries(store, campaigns(store).campaign_id.iloc[-1]).set_index("entry")
    assert list(rows.status) == ["finished", "failed", "finished"], rows.message.tolist()
    assert set(rows.work_queue) == {"gpu-0", "gpu-1"} and "does not import" in rows.message["broken"]
    api = httpx.Client(base_url=f"{base}/api", timeout=30)
    for entry in ("09_silu", "17_elementwise_chain"):
        flow_run = api.get(f"/flow_runs/{rows.prefect_flow_run_id[entry]}").json()
        assert flow_run["state_type"] == "COMPLETED" and flow_run["work_queue_name"] == rows.work_queue[entry]
        assert flow_run["name"] == rows.optimize_run_id[entry]  # a campaign's optimize runs are named by run id
        assert store.runs().set_index("run_id").prefect_flow_run_id[rows.optimize_run_id[entry]] == flow_run["id"]
