"""`kernelflow deploy`: the work pool, its queues and the deployments of infra/prefect.yaml, created or updated
against $PREFECT_API_URL; `kernelflow serve`: the campaign flow on a cron schedule in this process (no pool).

deploy makes (idempotent; run it again after changing infra/, or once per GPU host with --host):
- the docker work pool of each deployment in infra/prefect.yaml (kernelflow-gpu), its base job template
  infra/work-pool.json (GPU device requests, the checkout mounted, the flow-run image);
- one queue per GPU, gpu-0 .. gpu-(N-1) (or HOST-gpu-N with --host), and each queue a deployment names
  (campaign), every one with concurrency limit 1: one flow run per GPU at a time, one campaign at a time;
- the deployments (campaign/nightly with its cron schedule, optimize/gpu), each with its flow's parameter schema
  and the file's pull steps (the checkout's path on the hosts; --workdir overrides it).
It reads the same prefect.yaml that `prefect deploy` does, through the Prefect client: nothing is built or pushed.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import yaml

from kernelflow.stages.errors import KernelflowError

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INFRA = PROJECT_ROOT / "infra"
NIGHTLY_CRON = "0 2 * * *"  # infra/prefect.yaml's schedule of campaign/nightly (a test keeps the two equal)


def gpu_queues(gpus: int, host: str | None = None) -> list[str]:
    return [f"{host}-gpu-{i}" if host else f"gpu-{i}" for i in range(gpus)]


def load_flow(entrypoint: str) -> Any:
    """The flow object of an entrypoint such as flows/campaign.py:campaign, imported as a module of the project."""
    path, _, name = entrypoint.partition(":")
    module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    return getattr(module, name)


def deploy(gpus: int = 1, host: str | None = None, prefect_file: Path = INFRA / "prefect.yaml",
           template_file: Path = INFRA / "work-pool.json", image: str | None = None, workdir: str | None = None,
           pool_type: str = "docker") -> dict[str, Any]:
    """Create or update the pool(s), queues and deployments; what was applied, by name."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import WorkPoolCreate

    spec = yaml.safe_load(Path(prefect_file).read_text())
    template = json.loads(Path(template_file).read_text()) if pool_type == "docker" else None
    if template is not None and image:
        template["variables"]["properties"]["image"]["default"] = image
    pools = {d["work_pool"]["name"] for d in spec["deployments"]}
    applied: dict[str, Any] = {"pools": sorted(pools), "queues": {}, "deployments": []}
    with get_client(sync_client=True) as client:
        for pool in sorted(pools):
            fields = dict(name=pool, type=pool_type, description="kernelflow: one flow run per GPU (infra/README.md)")
            client.create_work_pool(WorkPoolCreate(**fields, **({"base_job_template": template} if template else {})),
                                    overwrite=True)
            named = {d["work_pool"].get("work_queue_name") for d in spec["deployments"] if d["work_pool"]["name"] == pool}
            applied["queues"][pool] = [*sorted(q for q in named if q), *gpu_queues(gpus, host)]
            for queue in applied["queues"][pool]:
                _queue(client, pool, queue)
        for deployment in spec["deployments"]:
            applied["deployments"].append(_deployment(client, deployment, spec.get("pull"), workdir, pool_type))
    return applied


def _queue(client: Any, pool: str, name: str) -> None:
    """A queue with concurrency limit 1, created or set."""
    from prefect.exceptions import ObjectNotFound

    try:
        queue = client.read_work_queue_by_name(name, work_pool_name=pool)
    except ObjectNotFound:
        client.create_work_queue(name=name, work_pool_name=pool, concurrency_limit=1,
                                 description="one flow run at a time (a GPU, or the campaign)")
    else:
        client.update_work_queue(queue.id, concurrency_limit=1)


def _deployment(client: Any, spec: dict, pull: list | None, workdir: str | None, pool_type: str) -> str:
    from prefect.client.schemas.actions import DeploymentScheduleCreate
    from prefect.client.schemas.schedules import CronSchedule
    from prefect.utilities.callables import parameter_schema

    flow = load_flow(spec["entrypoint"])
    steps = spec.get("pull", pull) or []
    if workdir is not None:
        steps = [{"prefect.deployments.steps.set_working_directory": {"directory": workdir}}]
    if any("cron" not in s for s in spec.get("schedules") or []):
        raise KernelflowError(f"deployment {spec['name']}: only cron schedules are applied")
    schedules = [DeploymentScheduleCreate(schedule=CronSchedule(cron=s["cron"], timezone=s.get("timezone")),
                                          active=s.get("active", True)) for s in spec.get("schedules") or []]
    pool = spec["work_pool"]
    client.create_deployment(
        flow_id=client.create_flow_from_name(flow.name), name=spec["name"], entrypoint=spec["entrypoint"],
        description=spec.get("description"), tags=spec.get("tags") or [], parameters=spec.get("parameters") or {},
        work_pool_name=pool["name"], work_queue_name=pool.get("work_queue_name"),
        job_variables={k: v for k, v in (pool.get("job_variables") or {}).items()  # a docker pool's own variable
                       if pool_type == "docker" or k != "device_requests"}, schedules=schedules, pull_steps=steps,
        parameter_openapi_schema=parameter_schema(flow).model_dump_for_openapi(), enforce_parameter_schema=True)
    return f"{flow.name}/{spec['name']}"


def serve(suite_path: str, cron: str = NIGHTLY_CRON, timezone: str = "UTC", name: str | None = None,
          store: str | None = None, dispatch: str | None = None) -> None:
    """Serve the campaign flow over one suite on a cron schedule, in this process, until interrupted."""
    from prefect.schedules import Cron

    from kernelflow.flows.campaign import campaign
    from kernelflow.flows.suite import load_suite

    suite = load_suite(suite_path)  # refuse a broken suite now, not at 2 am
    parameters: dict[str, Any] = {"suite_path": suite.path}
    if store:
        parameters["store"] = store
    if dispatch:
        parameters["dispatch"] = dispatch
    campaign.serve(name=name or suite.name, schedules=[Cron(cron, timezone=timezone)], parameters=parameters,
                   description=f"campaign over {suite.path}, {cron} ({timezone})")
