"""Stage `generate`: propose new candidates for a problem through the named proposer."""

from __future__ import annotations

from kernelflow.stages.contracts import GenerateRequest, GenerateResult
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.proposers import PROPOSERS


def run(req: GenerateRequest) -> GenerateResult:
    proposer = PROPOSERS.get(req.proposer)
    if proposer is None:
        raise KernelflowError(f"unknown proposer {req.proposer!r}; known: {sorted(PROPOSERS)}")
    return proposer(req)


if __name__ == "__main__":
    from kernelflow.stages.entry import stage_main

    stage_main(GenerateRequest, run)
