"""A captured profile: one small JSON file holding what refine needs to run again offline, with no GPU.

Written on the GPU machine by scripts/capture_ncu_fixtures.py (the defect fixtures under tests/fixtures/ncu/h200/)
and by `scripts/bench_gpu.py --profile-only` (bench/profiles/<problem>[.<workload>].<contender>.json), so the
tools can be recalibrated and the profile cells of bench/results re-derived (`scripts/bench_gpu.py --rerefine`)
without spending GPU time again.

    {"expected_tool": tool or null, "problem": path relative to the repository (else absolute), "gpu": device name,
     "candidate": Candidate or null (a baseline), "kernels": [KernelBinary: ptxas and SASS statistics],
     "library_calls": [the cuBLAS/cuDNN ops the candidate calls (CompileResult.library_calls); absent: none],
     "profile": ProfileResult with its file and blob references dropped (the .ncu-rep stays in the run's store)}
"""

from __future__ import annotations

import json
from pathlib import Path

from kernelflow.stages.contracts import Candidate, KernelBinary, ProfileResult
from kernelflow.stages.measure.tools import Evidence, evidence
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[2]


def dump(path: Path, problem_path: Path, gpu: str | None, profile: ProfileResult, candidate: Candidate | None = None,
         kernels: list[KernelBinary] | None = None, expected_tool: str | None = None,
         library_calls: list[str] | None = None) -> None:
    problem = Path(problem_path).resolve()
    record = {"expected_tool": expected_tool,
              "problem": str(problem.relative_to(ROOT) if problem.is_relative_to(ROOT) else problem),
              "gpu": gpu, "candidate": candidate.model_dump(mode="json") if candidate else None,
              "kernels": [k.model_dump(mode="json") for k in kernels or []], "library_calls": library_calls or [],
              "profile": profile.model_copy(update={"blobs": {}, "files": {}}).model_dump(mode="json")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")


def load_capture(path: Path) -> tuple[dict, Evidence]:
    """(the record, the Evidence refine reads): the class is left to refine when counters were read."""
    record = json.loads(Path(path).read_text())
    problem = load_problem(ROOT / record["problem"])
    profile = ProfileResult.model_validate(record["profile"])
    if record["candidate"] is not None and Candidate.model_validate(record["candidate"]).id != profile.candidate_id:
        raise ValueError(f"{path}: the candidate's id is not the profiled one ({profile.candidate_id})")
    ev = evidence(problem, None, profile, record["gpu"])
    return record, ev.model_copy(update={"binaries": [KernelBinary.model_validate(k) for k in record["kernels"]],
                                         "library_calls": record.get("library_calls", [])})
