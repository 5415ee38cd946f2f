"""kernelflow's command line: optimize, problems validate, verify, bench, show."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, cast

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

if TYPE_CHECKING:
    from stages.contracts import Device


def _default_device() -> Device:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def cmd_validate(args: argparse.Namespace) -> int:
    from stages.errors import ProblemError
    from stages.problem import check_runs, load_problem

    paths = [p for arg in args.paths for p in (sorted(Path(arg).glob("*.py")) if Path(arg).is_dir() else [Path(arg)])]
    broken = 0
    for path in paths:
        try:
            problem = load_problem(path)
            notes = check_runs(problem, "cpu" if problem.cpu_workloads else "gpu")
            print(f"ok      {path}: dtype {problem.dtype}, {len(problem.gpu_workloads)} GPU and "
                  f"{len(problem.cpu_workloads)} CPU shapes; " + "; ".join(notes))
        except ProblemError as e:
            broken += 1
            print(f"BROKEN  {e}")
    return 1 if broken else 0


def cmd_roofline(args: argparse.Namespace) -> int:
    from stages.peaks import KNOWN_PEAKS
    from stages.roofline import main as roofline

    if args.gpu not in KNOWN_PEAKS:
        print(f"no ceilings known for {args.gpu!r}; known: {', '.join(KNOWN_PEAKS)}", file=sys.stderr)
        return 1
    return roofline(args.paths, gpu=args.gpu)


def _judge(args: argparse.Namespace, timed: bool) -> int:
    from artifacts.store import Store
    from stages import defaults
    from stages.candidate import backend_of
    from stages.contracts import (
        BenchmarkRequest,
        BenchmarkResult,
        Candidate,
        CompileRequest,
        Origin,
        VerifyRequest,
    )
    from stages.executor import run_stage
    from stages.problem import load_problem

    problem = load_problem(args.problem)
    source = Path(args.candidate).read_text()
    candidate = Candidate.make(problem.id, args.backend or backend_of(source), source,
                               Origin(kind="user", proposer="file", params={"path": str(Path(args.candidate).resolve())}))
    device: Device = args.device or _default_device()
    sizes = args.sizes or defaults.timed_sizes(problem, device)
    store = Store(args.store)
    run_id = f"cli-{datetime.now(UTC):%Y%m%dT%H%M%S}-{problem.id}"
    common = dict(blob_dir=str(store.blob_dir), timeout_s=args.timeout)
    work = store.work_dir / run_id / candidate.id
    store.append("candidates", run_id, [candidate])
    print(f"{candidate.backend} candidate {candidate.id} for {problem.id} on {device}; artifacts under {store.root} "
          f"(run {run_id})", flush=True)
    results = [run_stage("compile", CompileRequest(candidate=candidate, problem=problem, workdir=str(work / "compile"),
                                                   **common))]
    store.append("compiles", run_id, results[-1:])
    if results[-1].status == "ok":
        results.append(run_stage("verify", VerifyRequest.model_validate(dict(
            problem=problem, candidate=candidate, device=device, sizes=defaults.verified_sizes(problem, device, sizes),
            workdir=str(work / "verify"),
            **common))))
        store.append("verifications", run_id, results[-1:])
    for r in results:
        kind = f": {r.failure_kind}" if r.failure_kind else ""
        print(f"{type(r).__name__.removesuffix('Result').lower():8s} {r.status}{kind}: {r.message}")
    if results[-1].status != "ok" or len(results) < 2:
        print("REJECTED", file=sys.stderr)
        return 1
    if not timed:
        print("VERIFIED")
        return 0
    baselines = args.baselines.split(",") if args.baselines else defaults.baselines(device)
    timed_result = cast(BenchmarkResult, run_stage("benchmark", BenchmarkRequest.model_validate(dict(
        problem=problem, candidate=candidate, device=device, sizes=sizes, baselines=baselines,
        workdir=str(work / "benchmark"), **common))))
    store.append_benchmark(run_id, timed_result)
    kind = f": {timed_result.failure_kind}" if timed_result.failure_kind else ""
    print(f"benchmark {timed_result.status}{kind}: {timed_result.message}")
    unit = "GPU" if device == "cuda" else "CPU (not comparable with GPU numbers)"
    print(f"{'workload':10s} {'contender':10s} {'median us':>12s} {'95% CI':>24s} {'reps':>5s}   [{unit}]")
    for t in timed_result.timings:
        print(f"{t.workload:10s} {t.contender:10s} {t.median_us:12.1f} {f'[{t.ci_low_us:.1f}, {t.ci_high_us:.1f}]':>24s}"
              f" {t.n_reps:5d}")
    print(f"speedup vs eager {timed_result.speedup_vs_eager}, vs torch.compile {timed_result.speedup_vs_compile}")
    return 0 if timed_result.status == "ok" else 1


def cmd_show(args: argparse.Namespace) -> int:
    from artifacts.leaderboard import baselines, leaderboard, render
    from artifacts.store import Store

    store = Store(args.store)
    runs = store.runs()
    if runs.empty:
        print(f"no runs in {store.root}", file=sys.stderr)
        return 1
    run_id = runs.sort_values("started_at").run_id.iloc[-1] if args.run == "latest" else args.run
    record = runs[runs.run_id == run_id]
    if record.empty:
        print(f"no run {run_id!r} in {store.root}; runs: {', '.join(runs.run_id)}", file=sys.stderr)
        return 1
    r = record.iloc[0]
    print(f"run {run_id}: {r.problem_id} on {r.device} ({r.sizes} shapes), {r.status}: {r.stop_reason}")
    print(f"candidates {r.n_candidates}, verified {r.n_verified}, best {r.best_candidate_id} "
          f"({r.best_speedup_vs_eager} x eager)")
    note = r.get("winner_note")  # NaN for runs recorded before the seeds rule
    print((note if isinstance(note, str) and note else "winner: not recorded (the run did not finish)") + "\n")
    if r.device == "cpu":
        print("CPU run: Triton candidates ran in Triton's interpreter, so these times show that the pipeline works "
              "and say nothing about GPU speed.\n")
    print(render(leaderboard(store, run_id)))
    base = baselines(store, run_id)
    if not base.empty:
        print("\nbaseline medians (us), per workload:\n" + base.to_string())
    return 0


def _policy(pairs: list[str] | None) -> dict | None:
    """--policy allow_vendor_libraries=false ... as Policy fields (booleans: true/false)."""
    from stages.contracts import Policy

    out: dict = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        if key not in Policy.model_fields or value.lower() not in ("true", "false"):
            raise SystemExit(f"--policy {pair!r}: expected one of {', '.join(Policy.model_fields)} = true|false")
        out[key] = value.lower() == "true"
    return out or None


def cmd_optimize(args: argparse.Namespace) -> int:
    from flows.optimize import main as optimize

    summary = optimize(args.problem, budget=args.budget, store=args.store, device=args.device, sizes=args.sizes,
                       proposer=args.proposer, backend=args.backend, wall_time_s=args.wall_time,
                       baselines=args.baselines.split(",") if args.baselines else None, executor=args.executor,
                       policy=_policy(args.policy), model=args.model, llm_max_tokens=args.llm_max_tokens,
                       llm_max_usd=args.llm_max_usd, strategy=args.strategy, gpu_s_budget=args.gpu_seconds,
                       resume=args.resume, warm_start=args.warm_start)
    print(f"\nbest candidate: {summary['best_candidate_id']} ({summary['best_speedup_vs_eager']} x eager)\n"
          f"{summary['winner_note']}\n`kernelflow show {summary['run_id']} --store {summary['store']}`")
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelflow", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--store", help="artifact store directory (default $KERNELFLOW_STORE or ./runs)")
        sp.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda if a GPU is visible, else cpu")
        sp.add_argument("--sizes", choices=["gpu", "cpu"], help="workload set to time (default: gpu on cuda)")
        sp.add_argument("--backend", choices=["triton", "cuda", "cute", "torch"])
        sp.add_argument("--baselines", help="comma list of eager,compile (default both on cuda, eager on cpu)")

    o = sub.add_parser("optimize", help="run the optimize flow on one problem")
    o.add_argument("problem")
    o.add_argument("--budget", type=int, default=8, help="candidates to evaluate")
    o.add_argument("--wall-time", type=float, default=3600.0, help="wall-time budget, seconds")
    o.add_argument("--proposer", choices=["builtin", "llm"], default="builtin",
                   help="builtin: templates, no LLM; llm: a model behind OPENAI_BASE_URL (key: OPENAI_API_KEY or the "
                   "Prefect Secret block named by KERNELFLOW_LLM_SECRET_BLOCK)")
    o.add_argument("--strategy", default="greedy", choices=["greedy", "mcts", "ladder", "agents"],
                   help="search strategy (flows/search/): greedy (repair the latest failure, else refine the best), "
                   "mcts (UCT over the candidate tree, progressive widening, lessons), ladder (multi-fidelity rungs), "
                   "agents (specialized agents taking turns, a shared memory, a deterministic guard)")
    o.add_argument("--gpu-seconds", type=float, help="stop when verify, benchmark and profile calls have used this "
                   "much device time")
    o.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run from its artifacts (its "
                   "unfinished candidates first; its strategy's saved state)")
    o.add_argument("--warm-start", action="store_true", help="evaluate the last finished run's best candidate of "
                   "this problem (same source) first")
    o.add_argument("--model", help="LLM model name (default $KERNELFLOW_LLM_MODEL)")
    o.add_argument("--llm-max-tokens", type=int, help="stop the run when its LLM calls have used this many tokens")
    o.add_argument("--llm-max-usd", type=float, help="stop the run when its LLM calls cost this much (estimate from "
                   "KERNELFLOW_LLM_PRICE_IN/_OUT, dollars per million tokens)")
    o.add_argument("--executor", choices=["subprocess", "inline"], default="subprocess")
    o.add_argument("--policy", action="append", metavar="FIELD=true|false",
                   help="override the problem's policy for this run, e.g. allow_vendor_libraries=false (repeatable)")
    common(o)
    o.set_defaults(fn=cmd_optimize)
    pr = sub.add_parser("problems", help="problem files").add_subparsers(dest="action", required=True)
    v = pr.add_parser("validate", help="check problem files (or directories of them)")
    v.add_argument("paths", nargs="+")
    v.set_defaults(fn=cmd_validate)
    rf = pr.add_parser("roofline", help="counted work, SOL floor and bottleneck class per GPU shape")
    rf.add_argument("paths", nargs="+")
    rf.add_argument("--gpu", default="NVIDIA H200", help="ceilings of this GPU (stages/peaks.py)")
    rf.set_defaults(fn=cmd_roofline)
    for name, timed in (("verify", False), ("bench", True)):
        sp = sub.add_parser(name, help=f"{'verify and time' if timed else 'verify'} your own ModelNew file")
        sp.add_argument("problem")
        sp.add_argument("candidate")
        sp.add_argument("--timeout", type=float, default=600.0, help="per-stage deadline, seconds")
        common(sp)
        sp.set_defaults(fn=lambda a, t=timed: _judge(a, t))
    s = sub.add_parser("show", help="leaderboard of a run, from the artifacts alone")
    s.add_argument("run", nargs="?", default="latest")
    s.add_argument("--store")
    s.set_defaults(fn=cmd_show)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if home := os.environ.get("PREFECT_HOME"):  # Prefect creates its home without parents, then fails to start
        Path(home).expanduser().mkdir(parents=True, exist_ok=True)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
