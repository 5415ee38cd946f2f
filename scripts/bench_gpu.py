"""`make bench-gpu`: the optimize flow over problems/ on the GPU, resumable in chunks; writes BENCHMARKS.md data.

Each problem's summary lands in bench/results/<problem>.json as soon as it finishes, so a run cut short by a
10-minute limit resumes where it stopped (`--only`, `--skip-done`). `--render` rebuilds the BENCHMARKS.md
table from those files. Numbers come from the artifact store of the runs (baselines and timings tables).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from artifacts.store import Store  # noqa: E402


def summarize(store: Store, run_id: str, problem_id: str, wall_s: float) -> dict:
    runs = store.runs()
    record = runs[runs.run_id == run_id].iloc[0].to_dict()
    best = record.get("best_candidate_id")
    bench = store.read("benchmarks", run_id)
    timings, base = store.read("timings", run_id), store.read("baselines", run_id)
    out: dict = {"problem": problem_id, "run_id": run_id, "stop_reason": record["stop_reason"],
                 "n_candidates": int(record["n_candidates"]), "n_verified": int(record["n_verified"]),
                 "wall_s": round(wall_s, 1), "best": best, "workloads": {}}
    if not bench.empty:
        out["gpu_s_benchmark"] = round(float(bench.duration_s.sum()), 1)
    if best and not bench.empty:
        row = bench[bench.candidate_id == best].iloc[-1]
        out.update(speedup_vs_eager=row.speedup_vs_eager, speedup_vs_compile=row.speedup_vs_compile)
        cand = store.read("candidates", run_id)
        out["best_origin"] = cand[cand.id == best].iloc[0][["origin_proposer", "origin_params"]].tolist()
        mine = timings[timings.candidate_id == best]
        call_base = base[base.benchmark_for == best]  # timed in the same call: same process, same inputs
        for t in mine.itertuples():
            same = call_base[(call_base.workload == t.workload)]
            w = out["workloads"].setdefault(t.workload, {})
            w["candidate"] = [t.median_us, t.ci_low_us, t.ci_high_us]
            for b in same.itertuples():
                w[b.contender] = [b.median_us, b.ci_low_us, b.ci_high_us]
    elif not base.empty:
        for b in base.itertuples():
            out["workloads"].setdefault(b.workload, {})[b.contender] = [b.median_us, b.ci_low_us, b.ci_high_us]
    if not base.empty:
        p = base.iloc[0]
        out["provenance"] = {k.removeprefix("provenance_"): (None if isinstance(v, float) and math.isnan(v) else v)
                             for k, v in p.items() if k.startswith("provenance_")}
    return out


def run(args: argparse.Namespace) -> None:
    from flows.optimize import main as optimize

    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    problems = sorted((ROOT / "problems").glob("*.py"))
    if args.only:
        problems = [p for p in problems if any(p.stem.startswith(o) for o in args.only.split(","))]
    deadline = time.monotonic() + args.max_minutes * 60
    for path in problems:
        dest = results / f"{path.stem}.json"
        if args.skip_done and dest.exists():
            continue
        if time.monotonic() > deadline:
            print(f"stopping before {path.stem}: --max-minutes reached; rerun with --skip-done to resume")
            break
        started = time.monotonic()
        summary = optimize(str(path), budget=args.budget, store=args.store, device="cuda", sizes="gpu",
                           wall_time_s=args.wall_time)
        data = summarize(Store(args.store), summary["run_id"], path.stem, time.monotonic() - started)
        dest.write_text(json.dumps(data, indent=1, default=str))
        if os.environ.get("OUT"):
            shutil.copy(dest, Path(os.environ["OUT"]) / dest.name)
        print(json.dumps({k: data.get(k) for k in ("problem", "speedup_vs_eager", "speedup_vs_compile",
                                                   "n_verified", "wall_s")}), flush=True)


def fmt(ci: list[float] | None) -> str:
    return f"{ci[0]:.1f} [{ci[1]:.1f}, {ci[2]:.1f}]" if ci else "-"


def ratio(t: dict, baseline: str) -> str:
    return f"{t[baseline][0] / t['candidate'][0]:.2f}" if baseline in t and "candidate" in t else "-"


def sol_floors(problem_id: str, gpu: str) -> dict[str, float]:
    """Analytic SOL floor per GPU workload (counted work over the machine's ceilings); empty if unknown GPU."""
    from stages.peaks import peaks_for
    from stages.problem import load_problem
    from stages.roofline import count_work, sol_floor_us

    peaks = peaks_for(gpu)
    if peaks is None:
        return {}
    problem = load_problem(ROOT / "problems" / f"{problem_id}.py")
    return {w.name: sol_floor_us(count_work(problem, w), peaks, problem.policy) for w in problem.gpu_workloads}


def render() -> str:
    rows = [json.loads(p.read_text()) for p in sorted((ROOT / "bench" / "results").glob("*.json"))]
    lines = ["| problem | workload | eager us | torch.compile us | best candidate us | x eager | x compile | "
             "SOL floor us (fraction) | best (family, params) | verified/tried |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        floors = sol_floors(r["problem"], r.get("provenance", {}).get("device_name", ""))
        for i, (w, t) in enumerate(sorted(r["workloads"].items())):
            first = i == 0
            origin = " ".join(map(str, r.get("best_origin", []))) if first else ""
            tried = f"{r['n_verified']}/{r['n_candidates']}" if first else ""
            sol = (f"{floors[w]:.0f} ({floors[w] / t['candidate'][0]:.2f})" if w in floors and "candidate" in t
                   else "-")
            lines.append(f"| {r['problem'] if first else ''} | {w} | {fmt(t.get('eager'))} | {fmt(t.get('compile'))} | "
                         f"{fmt(t.get('candidate'))} | {ratio(t, 'eager')} | {ratio(t, 'compile')} | {sol} | {origin} | "
                         f"{tried} |")
        if not r["workloads"]:
            lines.append(f"| {r['problem']} | - | - | - | - | - | - | - | {r['stop_reason'][:80]} | 0/0 |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", help="comma list of problem id prefixes, e.g. 01,02,17")
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--wall-time", type=float, default=300.0, help="per problem, seconds")
    ap.add_argument("--max-minutes", type=float, default=8.0, help="start no new problem after this")
    ap.add_argument("--skip-done", action="store_true")
    ap.add_argument("--store", default=str(ROOT / "runs-bench"))
    ap.add_argument("--render", action="store_true", help="print the BENCHMARKS.md table from bench/results")
    a = ap.parse_args()
    print(render()) if a.render else run(a)
