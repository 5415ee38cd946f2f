"""Which part of the benchmark stage's loop adds device time to a candidate: benchmark.run five times in one process,
as-is and with one input set / without the in-place input rewrite / both (H200, 2026-11-30: no variant mattered;
the host's launch path did, see stages/timing.py COVER_US). From the repo root, on a GPU host:
`python scripts/probes/harness_variants.py 09_silu 01_softmax`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_gpu import rebuild  # noqa: E402

import stages.benchmark as bench  # noqa: E402
from stages.contracts import BenchmarkRequest  # noqa: E402
from stages.problem import load_problem  # noqa: E402

SETS, TIMED = bench._input_sets, bench._Candidate.timed


def one_set(module: Any, w: Any, req: Any, timer: Any) -> list[Any]:
    return SETS(module, w, req, timer)[:1]


def timed_without_rewrite(self: Any, timer: Any, args: list[Any], what: str) -> tuple[float, Any]:
    with self.guard.section(what, timed=True) as call, torch.no_grad():
        us, out = timer.time_us(self.fn, args)
    self.launched(call.launches, what)
    return us, out


VARIANTS = {"as-is": (SETS, TIMED), "one-set": (one_set, TIMED), "no-rewrite": (SETS, timed_without_rewrite),
            "both": (one_set, timed_without_rewrite), "as-is-again": (SETS, TIMED)}

if __name__ == "__main__":
    for pid in sys.argv[1:]:
        problem = load_problem(ROOT / "problems" / f"{pid}.py")
        cand = rebuild(problem, json.loads((ROOT / "bench" / "results" / f"{pid}.json").read_text()))
        for name, (sets, timed) in VARIANTS.items():
            bench._input_sets, bench._Candidate.timed = sets, timed  # type: ignore[method-assign]
            res = bench.run(BenchmarkRequest(problem=problem, candidate=cand, device="cuda", sizes="gpu",
                                             baselines=["eager"], workdir=f"/tmp/kf-probe/{pid}",
                                             blob_dir="/tmp/kf-probe/blobs", timeout_s=300))
            medians = {f"{t.workload}/{t.contender}": round(t.median_us, 1) for t in res.timings}
            print(pid, name, res.status, res.message[:100], json.dumps(dict(sorted(medians.items()))), flush=True)
