"""Where a campaign's optimize runs happen: here, as subflows one after another (one GPU, or the CPU), or as flow runs
of the optimize deployment on the GPU work queues of a pool (infra/), at most one in flight per queue, the next
problem going to whichever queue frees first. Either way each run ends as a `Done`: its flow run, and whether that
flow run completed; what the run recorded is read from the store by the run id the campaign gave it
(flows/campaign.py).

A queue named gpu-N or HOST-gpu-N is GPU N of the host whose worker polls it. On a docker pool each run gets that
GPU alone as a device request (the `device_requests` variable of infra/work-pool.json); a worker of another type
is expected to pin its GPU itself (CUDA_VISIBLE_DEVICES in its environment).
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast
from uuid import UUID

from pydantic import BaseModel

from kernelflow.flows.suite import Dispatch, Entry
from kernelflow.stages.errors import KernelflowError

if TYPE_CHECKING:
    from prefect.client.schemas.objects import FlowRun

GPU_QUEUE = re.compile(r"(?:^|-)gpu-(\d+)$")


@dataclass(frozen=True)
class Job:
    entry: Entry
    parameters: dict[str, Any]  # optimize's
    flow_run_name: str


@dataclass(frozen=True)
class Done:
    job: Job
    flow_run_id: str | None
    completed: bool  # the flow run reached Completed
    message: str  # its final state's message (an exception's text when it failed)
    work_queue: str | None = None


def local(jobs: Sequence[Job], done: Callable[[Done], None]) -> None:
    """Each job as a subflow of the calling flow, in order; a failing one is a Done like any other."""
    from kernelflow.flows.optimize import optimize

    for job in jobs:
        state = optimize.with_options(flow_run_name=job.flow_run_name)(**job.parameters, return_state=True)
        flow_run_id = state.state_details.flow_run_id
        done(Done(job, str(flow_run_id) if flow_run_id else None, state.is_completed(), state.message or ""))


def gpu_of(queue: str) -> int:
    found = GPU_QUEUE.search(queue)
    if found is None:
        raise KernelflowError(f"work queue {queue!r} names no GPU (gpu-N or HOST-gpu-N)")
    return int(found.group(1))


def job_variables(pool_type: str, queue: str) -> dict[str, Any]:
    """A docker pool's run gets its queue's GPU alone; other pool types take none from here."""
    if pool_type != "docker":
        return {}
    return {"device_requests": [{"driver": "nvidia", "device_ids": [str(gpu_of(queue))], "capabilities": [["gpu"]]}]}


def _jsonable(parameters: dict[str, Any]) -> dict[str, Any]:
    return {k: v.model_dump(mode="json") if isinstance(v, BaseModel) else v for k, v in parameters.items()}


def deployments(dispatch: Dispatch, jobs: Sequence[Job], done: Callable[[Done], None], campaign_id: str) -> None:
    """Each job as a flow run of the optimize deployment on a GPU queue of the pool, one in flight per queue; returns
    when every run has ended (or outlived dispatch.run_timeout_s, then recorded as failed and left running)."""
    from prefect.client.orchestration import get_client
    from prefect.deployments import run_deployment

    with get_client(sync_client=True) as client:
        pool = client.read_work_pool(dispatch.work_pool)
        queues = dispatch.queues or sorted((q.name for q in client.read_work_queues(work_pool_name=pool.name)
                                            if GPU_QUEUE.search(q.name)), key=lambda n: (gpu_of(n), n))
        if not queues:
            raise KernelflowError(f"work pool {pool.name!r} has no GPU queue (gpu-N); `kernelflow deploy` makes them")
        print(f"dispatching {len(jobs)} runs of {dispatch.deployment} over {pool.type} pool {pool.name}: "
              f"{', '.join(queues)}")
        waiting: deque[Job] = deque(jobs)
        running: dict[str, tuple[Job, UUID, float]] = {}  # queue -> (job, its flow run, when it was sent)
        while waiting or running:
            for queue in queues:
                if queue not in running and waiting:
                    job = waiting.popleft()
                    flow_run = cast("FlowRun", run_deployment(  # sync here: a FlowRun, not a coroutine
                        dispatch.deployment, parameters=_jsonable(job.parameters), flow_run_name=job.flow_run_name,
                        timeout=0, work_queue_name=queue, job_variables=job_variables(pool.type, queue),
                        idempotency_key=f"{campaign_id}/{job.entry.name}"))
                    running[queue] = (job, flow_run.id, time.monotonic())
                    print(f"{job.entry.name}: flow run {flow_run.name} ({flow_run.id}) on {queue}")
            time.sleep(dispatch.poll_s)
            for queue, (job, flow_run_id, since) in list(running.items()):
                state = client.read_flow_run(flow_run_id).state
                late = dispatch.run_timeout_s is not None and time.monotonic() - since > dispatch.run_timeout_s
                if state is not None and state.is_final():
                    done(Done(job, str(flow_run_id), state.is_completed(), state.message or "", queue))
                elif late:
                    done(Done(job, str(flow_run_id), False, f"still {state.name if state else 'unknown'} after "
                              f"{dispatch.run_timeout_s:.0f} s; left running", queue))
                else:
                    continue
                del running[queue]
