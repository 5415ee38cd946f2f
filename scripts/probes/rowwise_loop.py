"""The rowwise family's long-row kernels on one workload per problem: the looped kernel's chunk (loop_block_d) and
warps (loop_warps), and wider resident rows (max_block_d), each verified and timed by the benchmark stage beside
eager (every call) and torch.compile (first and last call, a drift check), one process.
From the repo root, on a GPU host:
`python scripts/probes/rowwise_loop.py --out bench/probes/rowwise-loop.json 01_softmax:gpu2 03_layernorm:gpu2`."""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_gpu import rebuild  # noqa: E402

from stages import benchmark  # noqa: E402
from stages.contracts import BenchmarkRequest  # noqa: E402
from stages.problem import load_problem  # noqa: E402

CHUNKS, WARPS = (2048, 4096, 8192, 16384), (4, 8, 16)


def variants(base: dict[str, Any], width: int) -> list[dict[str, Any]]:
    """The looped kernel's chunk x warps under the stored best's other parameters (at least 4 elements a thread),
    then the row resident (max_block_d = next_power_of_2(width)) where that is wider than the best's."""
    out = [{**base, "loop_block_d": c, "loop_warps": w} for c, w in itertools.product(CHUNKS, WARPS) if c // (32 * w) >= 4]
    wide = 1 << (width - 1).bit_length()
    if base["max_block_d"] < wide <= 32768:  # wider spills: 64 Ki registers an SM hold 64 floats a thread at 1024
        out += [{**base, "max_block_d": wide, "num_warps": w} for w in (16, 32)]
    return out


def probe(problem_id: str, workload: str, budget_s: float, device: str = "cuda") -> list[dict[str, Any]]:
    problem = load_problem(ROOT / "problems" / f"{problem_id}.py")
    data = json.loads((ROOT / "bench" / "results" / f"{problem_id}.json").read_text())
    family, base = data["best_origin"][0], json.loads(data["best_origin"][1])
    sizes = "gpu" if device == "cuda" else "cpu"
    params = variants(base, next(w for w in problem.workloads(sizes) if w.name == workload).params["dim"])
    rows = []
    for i, p in enumerate(params):
        cand = rebuild(problem, {"best_origin": [family, json.dumps(p)]})
        assert cand is not None
        baselines = ["eager", "compile"] if i in (0, len(params) - 1) else ["eager"]
        with tempfile.TemporaryDirectory() as work:
            started = time.monotonic()
            res = benchmark.run(BenchmarkRequest(problem=problem, candidate=cand, device=device, sizes=sizes,  # type: ignore[arg-type]
                                                 baselines=baselines, workloads=[workload], precheck=[workload],
                                                 budget_s=budget_s, workdir=work, blob_dir=work))
        row = {"problem": problem_id, "workload": workload, "params": p, "status": res.status,
               "message": res.message[:300], "wall_s": round(time.monotonic() - started, 1),
               "timings": {t.contender: {"median_us": t.median_us, "ci_low_us": t.ci_low_us,
                                         "ci_high_us": t.ci_high_us, "n_reps": t.n_reps} for t in res.timings}}
        rows.append(row)
        cells = " ".join(f"{k} {v['median_us']:.1f} [{v['ci_low_us']:.1f}, {v['ci_high_us']:.1f}]"
                         for k, v in row["timings"].items())
        print(f"{problem_id} {workload} {json.dumps({k: v for k, v in p.items() if k not in base or base[k] != v})}"
              f" {res.status} {cells} {row['wall_s']} s", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("targets", nargs="+", help="problem_id:workload")
    ap.add_argument("--budget-s", type=float, default=4.0, help="timing budget per call")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test on the CPU shapes (cpu0, cpu1)")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for target in args.targets:
        problem_id, workload = target.split(":")
        rows += probe(problem_id, workload, args.budget_s, args.device)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
