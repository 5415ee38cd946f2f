"""A stage for tests/stages/executors/test_sandbox.py: runs a probe's code as candidate code runs, with none of the in-process defences
(no static checks, no audit hook), so what the probe can do is what the executor's sandbox alone allows.

`python -m tests.sandbox_stage REQUEST.json RESULT.json`; the probe fills the dict `out`, returned as the message."""

from __future__ import annotations

import json

from pydantic import Field

from kernelflow.stages.contracts import Device, StageRequest, StageResult
from kernelflow.stages.entry import stage_main

Result = StageResult


class ProbeRequest(StageRequest):
    code: str = Field(description="Python run in the stage process; it reports through the dict `out`")
    device: Device = Field(default="cpu", description="what the sandbox takes the request to run on")


def run(req: ProbeRequest) -> StageResult:
    out: dict = {}
    exec(req.code, {"out": out})
    return StageResult(candidate_id="probe", problem_id="probe", status="ok", message=json.dumps(out))


def failed(req: ProbeRequest, kind: str, message: str, files: dict[str, str] | None = None) -> StageResult:
    return StageResult(candidate_id="probe", problem_id="probe", status="failed", failure_kind=kind, message=message,
                       files=files or {})


if __name__ == "__main__":
    stage_main(ProbeRequest, run)
