"""Search strategies compared: the same problems with the same budget under each strategy of flows/search/STRATEGIES.

Per problem and strategy: the best verified speedup over eager the run reached (runs table) and the device seconds
it spent evaluating (verifications and benchmarks tables: every verify and benchmark call; a ladder's rungs table
splits them by rung, with its pruned candidates), profiling apart (the loop profiles each new best, whatever the
strategy). The ladder's promise (issue 6): the flat evaluation's (greedy's) best with at most half its device
seconds; the table gives each strategy's device seconds as a fraction of greedy's.

Writes <out>/results.json after every run (--max-minutes stops starting runs; a rerun with --skip-done resumes)
and <out>/SEARCH.md; with $OUT set (the device machine), copies both there. On the H200:
`python scripts/bench_search.py --device cuda --skip-done`. With `--device cpu` (Triton's interpreter) the script
runs anywhere, but CPU numbers are not speed claims: they check the plumbing, and only GPU runs with provenance go
into BENCHMARKS.md (DESIGN.md, "How we time").
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

import pandas as pd  # noqa: E402

from kernelflow.artifacts.store import Store  # noqa: E402

PROBLEMS = "01_softmax,03_layernorm,09_silu,17_elementwise_chain,20_mse_loss"
TOLERANCE = 0.03  # a best within 3% of greedy's counts as reaching it (the ladder's noise floor)


def _seconds(frame: pd.DataFrame) -> float:
    return float(frame.duration_s.fillna(0).sum()) if not frame.empty else 0.0


def _value(x: object) -> object:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def summarize(store: Store, run_id: str) -> dict:
    """One run: its best, its device seconds (verify and benchmark calls of candidates), profiles apart, per rung."""
    runs = store.runs()
    record = runs[runs.run_id == run_id].iloc[-1]
    verify, bench, prof, rungs = (store.read(t, run_id) for t in ("verifications", "benchmarks", "profiles", "rungs"))
    evaluated = bench[bench.candidate_id != "baseline"] if not bench.empty else bench
    per_rung = {str(r): {"device_s": round(float(g.device_s.sum()), 3), **g.outcome.value_counts().to_dict()}
                for r, g in rungs.groupby("rung")} if not rungs.empty else {}
    return {"run_id": run_id, "best_candidate_id": _value(record.best_candidate_id),
            "best_speedup_vs_eager": _value(record.best_speedup_vs_eager), "winner": _value(record.winner),
            "n_candidates": int(record.n_candidates), "n_verified": int(record.n_verified),
            "n_pruned": int((rungs.outcome == "pruned").sum()) if not rungs.empty else 0,
            "device_s": _seconds(verify) + _seconds(evaluated), "profile_s": _seconds(prof),
            "stop_reason": record.stop_reason, "rungs": per_rung}


def render(results: dict) -> str:
    """The markdown table: per problem and strategy, and per strategy over all problems."""
    lines = ["| problem | strategy | best x eager | device s | of greedy's | reaches greedy's best | profile s | "
             "verified/tried | pruned |", "|---|---|---|---|---|---|---|---|---|"]
    totals: dict[str, list[float]] = {}
    for problem, by in results.items():
        flat = by.get("greedy", {})
        for strategy, r in by.items():
            best, flat_best = r["best_speedup_vs_eager"], flat.get("best_speedup_vs_eager")
            share = r["device_s"] / flat["device_s"] if flat.get("device_s") else None
            reaches = "-" if flat_best is None else "yes" if best and best >= flat_best * (1 - TOLERANCE) else "no"
            totals.setdefault(strategy, []).append(r["device_s"])
            lines.append(f"| {problem} | {strategy} | {best or 0:.3f} | {r['device_s']:.1f} | "
                         f"{f'{share:.0%}' if share is not None else '-'} | {reaches} | {r['profile_s']:.1f} | "
                         f"{r['n_verified']}/{r['n_candidates']} | {r['n_pruned']} |")
    lines += ["", "| strategy | device s, all problems |", "|---|---|"]
    lines += [f"| {s} | {sum(v):.1f} |" for s, v in totals.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    from kernelflow.flows.config import RunConfig
    from kernelflow.flows.optimize import optimize
    from kernelflow.flows.search import STRATEGIES

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--problems", default=PROBLEMS, help="comma list of problems/ stems")
    p.add_argument("--strategies", default=",".join(STRATEGIES), help="comma list (default: every strategy)")
    p.add_argument("--budget", type=int, default=8, help="candidates per run")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--executor", choices=["subprocess", "inline"], default="subprocess")
    p.add_argument("--store", default=str(ROOT / "runs-bench"))
    p.add_argument("--out", default=str(ROOT / "bench" / "search"))
    p.add_argument("--profile", action="store_true", help="profile each new best (ncu; slower)")
    p.add_argument("--skip-done", action="store_true", help="keep the results already in results.json")
    p.add_argument("--max-minutes", type=float, default=8.0, help="start no new run after this (then --skip-done)")
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dest = out / "results.json"
    results: dict = json.loads(dest.read_text()) if args.skip_done and dest.exists() else {}
    deadline = time.monotonic() + 60 * args.max_minutes
    for problem in args.problems.split(","):
        for strategy in args.strategies.split(","):
            if strategy in results.get(problem, {}) or time.monotonic() > deadline:
                continue
            started = time.monotonic()
            summary = optimize(str(ROOT / "problems" / f"{problem}.py"), RunConfig(
                budget=args.budget, store=args.store, device=args.device, executor=args.executor, strategy=strategy,
                profile=args.profile, baseline_profiles=False))
            row = summarize(Store(args.store), summary["run_id"]) | {"wall_s": round(time.monotonic() - started, 1)}
            results.setdefault(problem, {})[strategy] = row
            dest.write_text(json.dumps(results, indent=1, default=str))
            (out / "SEARCH.md").write_text(render(results))
            for name in ("results.json", "SEARCH.md") if os.environ.get("OUT") else ():  # a cut-short run keeps these
                shutil.copy(out / name, Path(os.environ["OUT"]) / name)
            print(json.dumps({"problem": problem, "strategy": strategy, **{k: row[k] for k in (
                "best_speedup_vs_eager", "device_s", "n_pruned")}}), flush=True)
    print(render(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
