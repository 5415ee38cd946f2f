"""Load test of the campaign flow (issue 8, part 6): N synthetic problems x C candidates each, through the real
campaign flow (flows/campaign.py: a real Prefect API, an ephemeral server in a fresh PREFECT_HOME unless one is
configured; the real Parquet store; the real stages, inline or in subprocesses), measured while it runs.

    .venv/bin/python scripts/load_campaign.py --problems 50 --candidates 20 --reps 3 5 --timing-budget-s 2
    .venv/bin/python scripts/load_campaign.py --problems 5 --candidates 6 --executor subprocess --history 1000

The problems are tiny KernelBench-style elementwise chains, each a different chain of ops (so each is a different
problem for the templates), written into a temporary suite. The builtin proposer has at most 8 variants for such a
problem, so the runs use the `load-grid` proposer registered here: the builtin elementwise template rendered over
a wider grid (BLOCK 32..16384 x num_warps 1..8, 40 parameter sets), each an honest kernel that compiles, verifies and
is timed like any other. It is registered in this process only; the flow proposes in-process (generate is inline).

Measured: the flow process's RSS (VmRSS, VmHWM from /proc) and that of its child processes (the ephemeral Prefect
server, stage processes) over time; per candidate its wall time (propose + evaluate), the time in stage calls, in
store writes and reads, the table parts read and written, and the overhead (wall minus stage time); per problem its
reads and wall; the store's size and file count. The JSON result holds all of it (rewritten every 100 candidates,
so a run cut short leaves what it measured); a summary goes to stdout, a progress line every 10 candidates to stderr.
Checked from the store afterwards (exit 1 if not): every candidate recorded exactly once (one candidates, compiles,
verifications and benchmarks row each) and every problem finished. tests/flows/test_load.py runs a small version and
checks from the JSON that no candidate and no run reads beyond its own partition (--history puts earlier runs in
the store, so a whole-table read would show). BENCHMARKS.md, "Load", has the numbers of the full run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
UNARY = ["torch.sigmoid({x})", "torch.tanh({x})", "torch.relu({x})", "torch.abs({x})", "torch.sin({x})",
         "torch.cos({x})", "({x} * {x})", "F.silu({x})", "F.hardswish({x})", "torch.clamp({x}, -0.5, 0.75)",
         "torch.exp(torch.clamp({x}, max=1.0))", "F.leaky_relu({x}, 0.1)"]
GRID = [{"BLOCK": 1 << b, "num_warps": w} for b in range(5, 15) for w in (1, 2, 4, 8)]  # 40 parameter sets


def problem_source(i: int) -> str:
    """Problem i: a chain of 2 or 3 unary ops, after a per-column affine for odd i; tiny CPU shapes."""
    ops = [UNARY[i % len(UNARY)], UNARY[(i // len(UNARY) + 3 * i + 1) % len(UNARY)]]
    if i % 3 == 0:
        ops.append(UNARY[(5 * i + 7) % len(UNARY)])
    expr = "x * self.scale + self.bias" if i % 2 else "x"
    for op in ops:
        expr = op.format(x=expr)
    params = ("        self.scale = nn.Parameter(1.0 + 0.5 * torch.randn(dim))\n"
              "        self.bias = nn.Parameter(0.5 * torch.randn(dim))\n") if i % 2 else ""
    return f'''"""Synthetic load-test problem {i}: an elementwise chain (scripts/load_campaign.py)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
dim = 256


class Model(nn.Module):
    def __init__(self, dim):
        super().__init__()
{params}
    def forward(self, x):
        return {expr}


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return [dim]


WORKLOADS = {{"gpu": [dict(batch_size=64, dim=256)], "cpu": [dict(batch_size=4, dim={96 + i % 7}), dict(batch_size=3, dim=61)]}}
'''


def write_suite(where: Path, n_problems: int, candidates: int, executor: str, profile: bool,
                families: list[str] | None = None) -> Path:
    problems = where / "problems"
    problems.mkdir(parents=True, exist_ok=True)
    for i in range(n_problems):
        (problems / f"load_{i:03d}.py").write_text(problem_source(i))
    asked = f", families: {json.dumps(families)}" if families else ""  # else every family, the default
    lines = ["name: load", "device: cpu", f"executor: {executor}", "regression_floor: 0.5",
             f"defaults: {{budget: {candidates}, strategy: greedy, proposer: load-grid, seeds: 0, "
             f"profile: {str(profile).lower()}{asked}}}",
             "problems:"] + [f"  - problems/load_{i:03d}.py" for i in range(n_problems)]
    suite = where / "suite.yaml"
    suite.write_text("\n".join(lines) + "\n")
    return suite


def history(store_root: Path, runs: int) -> None:
    """Earlier nights in the store: `runs` finished optimize runs of another problem, two runs-table parts each (as a
    real run writes, when it starts and when it ends) and its problem_runs row, so a read that scans the whole table
    shows up."""
    from kernelflow.artifacts.problem_runs import index
    from kernelflow.artifacts.store import Store
    from kernelflow.stages.contracts import RunRecord

    store = Store(store_root)
    for i in range(runs):
        when = f"2026-10-{1 + i % 28:02d}T02:00:00+00:00"
        index(store, "earlier", f"20261001T020000-earlier-{i:06x}")
        for status in ("running", "finished"):
            store.append("runs", f"20261001T020000-earlier-{i:06x}", [RunRecord(
                problem_id="earlier", status=status, started_at=when, updated_at=when, device="cpu", sizes="cpu",
                budget_candidates=20, proposer="builtin", code_version="history")])


def grid_proposer(req: Any) -> Any:
    """The builtin elementwise template over GRID, the first parameter sets not tried yet (seed-rotated)."""
    from kernelflow.stages.contracts import Candidate, GenerateResult, Origin
    from kernelflow.stages.problems.kernelbench import import_problem
    from kernelflow.stages.templates import elementwise
    from kernelflow.stages.templates.lowering import trace

    plan = elementwise.match(req.problem, trace(req.problem, import_problem(req.problem.path)))
    shift = req.seed % len(GRID)
    out: list[Any] = []
    for params in GRID[shift:] + GRID[:shift]:
        cand = Candidate.make(req.problem.id, "triton", elementwise.render(plan, params),
                              Origin(kind="builtin", proposer="elementwise", params=params), parent_id=None)
        if cand.id not in req.exclude_ids and len(out) < req.n:
            out.append(cand)
    return GenerateResult(problem_id=req.problem.id, proposer="load-grid", candidates=out,
                          message="" if out else f"all {len(GRID)} grid points tried")


def _status_kb(pid: int | str, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def prefect_db() -> Path:  # (where the ephemeral server keeps its database)
    return Path(os.environ.get("PREFECT_HOME", "~/.prefect")).expanduser() / "prefect.db"


def _size_mb(path: Path) -> float:
    return path.stat().st_size / 2**20 if path.exists() else 0.0


class Meter:
    """Counters the flow's code paths feed (installed by `instrument`), and a thread that samples memory."""

    def __init__(self, every_s: float, checkpoint: Callable[[], object]):
        self.t0 = time.monotonic()
        self.checkpoint = checkpoint  # writes what is measured so far (every 100 candidates): a killed run leaves it
        self.every_s = every_s
        self.report_every = 10  # candidates between progress lines on stderr
        self.samples: list[dict] = []
        self.candidates: list[dict] = []
        self.problems: list[dict] = []
        self.io = dict(write_s=0.0, read_s=0.0, parts_written=0, parts_read=0, reads=0, stage_s=0.0)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_loop, daemon=True)

    def now(self) -> float:
        return time.monotonic() - self.t0

    def sample(self) -> dict:
        from kernelflow.stages.executors.sandbox import descendants

        kids = descendants(os.getpid())
        row = dict(t_s=round(self.now(), 2), rss_kb=_status_kb("self", "VmRSS"), hwm_kb=_status_kb("self", "VmHWM"),
                   children_rss_kb=sum(_status_kb(k, "VmRSS") for k in kids), n_children=len(kids),
                   candidates=len(self.candidates), prefect_db_mb=round(_size_mb(prefect_db()), 2))
        self.samples.append(row)
        return row

    def _sample_loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.sample()

    def start(self) -> None:
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


def quick_timing(min_reps: int, max_reps: int, budget_s: float) -> None:
    """Fewer timing repetitions per benchmark call (BenchmarkRequest's knobs, through kernelflow.flows.run.benchmark_step, as a
    ladder's cheap rung passes them): on this CPU the default (20 to 300 repetitions per contender until the 95%
    interval is within 2%, up to 30 s per shape) is most of a candidate's wall time and says nothing about the flow."""
    import kernelflow.flows.run

    step = kernelflow.flows.run.benchmark_step

    def quick(run: Any, candidate: Any, *a: Any, **knobs: Any) -> Any:
        return step(run, candidate, *a, **{"min_reps": min_reps, "max_reps": max_reps, "budget_s": budget_s, **knobs})

    kernelflow.flows.run.benchmark_step = quick  # verify_and_time calls it by its module name


def instrument(meter: Meter) -> None:
    """Wrap the store's table reads and writes, the stage calls and the search's propose/consider steps, so each
    candidate's time and I/O is known. Only wrappers: what the flow does is unchanged."""
    import kernelflow.flows.search.protocol as protocol
    import kernelflow.flows.steps
    from kernelflow.artifacts import tables

    read_part = tables.read_part

    def counted_part(*a: Any, **k: Any) -> Any:  # tables.read reads its parts through this: count them
        meter.io["parts_read"] += 1
        return read_part(*a, **k)

    tables.read_part = counted_part

    def timed(owner: Any, name: str, seconds: str, count: str | None = None) -> None:
        inner: Callable = getattr(owner, name)

        def wrapper(*a: Any, **k: Any) -> Any:
            started = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                meter.io[seconds] += time.perf_counter() - started
                if count:
                    meter.io[count] += 1

        setattr(owner, name, wrapper)

    timed(tables, "append", "write_s", "parts_written")  # store.py calls tables.append / tables.read
    timed(tables, "read", "read_s", "reads")
    timed(kernelflow.flows.steps, "run_stage", "stage_s")
    run_stage = kernelflow.flows.steps.run_stage

    def per_stage(name: str, *a: Any, **k: Any) -> Any:  # each stage's own seconds too (compile, verify, ...)
        started = time.perf_counter()
        try:
            return run_stage(name, *a, **k)
        finally:
            meter.io[f"{name}_s"] = meter.io.get(f"{name}_s", 0.0) + time.perf_counter() - started

    kernelflow.flows.steps.run_stage = per_stage
    for name in ("compile", "verify", "benchmark", "profile"):
        meter.io[f"{name}_s"] = 0.0
    propose, consider = protocol.ask_proposer, protocol.consider
    state: dict[str, Any] = {"problem": None, "since": None, "io": None}

    def snapshot() -> dict:
        return dict(meter.io)

    def measured_propose(run: Any, req: Any) -> Any:
        state["since"], state["io"] = time.perf_counter(), snapshot()
        return propose(run, req)

    def measured_consider(run: Any, strategy: Any, candidate: Any, *a: Any, **k: Any) -> Any:
        if state["since"] is None:
            state["since"], state["io"] = time.perf_counter(), snapshot()
        parts_before = meter.io["parts_written"]
        try:
            return consider(run, strategy, candidate, *a, **k)
        finally:
            wall, before = time.perf_counter() - state["since"], state["io"]
            delta = {k: meter.io[k] - before[k] for k in meter.io}
            meter.candidates.append(dict(
                index=len(meter.candidates), run_id=run.id, problem_id=run.problem.id, in_run=len(run.state.tried),
                candidate_id=candidate.id, t_end_s=round(meter.now(), 3), wall_s=wall, stage_s=delta["stage_s"],
                overhead_s=wall - delta["stage_s"], write_s=delta["write_s"], read_s=delta["read_s"],
                parts_written=delta["parts_written"], parts_read=delta["parts_read"], reads=delta["reads"],
                store_parts_before=parts_before, rss_kb=_status_kb("self", "VmRSS"),
                **{f"{n}_s": delta[f"{n}_s"] for n in ("compile", "verify", "benchmark", "profile")}))
            state["since"] = None
            if len(meter.candidates) % meter.report_every == 0:
                last = meter.candidates[-1]
                os.write(2, (  # not print: inside the flow, prints go to Prefect's logger
                    f"[load {meter.now():.0f} s] {len(meter.candidates)} candidates; {last['problem_id']} "
                    f"#{last['in_run']}: wall {wall:.2f} s, stages {delta['stage_s']:.2f} s, RSS "
                    f"{last['rss_kb'] / 1024:.0f} MB\n").encode())
            if len(meter.candidates) % 100 == 0:
                meter.checkpoint()

    protocol.ask_proposer, protocol.consider = measured_propose, measured_consider


def instrument_problems(meter: Meter) -> None:
    """Per suite entry: the wall of its optimize subflow and the store I/O around it (run start, end, conclude)."""
    import kernelflow.flows.campaign as campaign
    import kernelflow.flows.dispatch as dispatch

    local = dispatch.local

    def measured_local(jobs: Any, done: Callable) -> None:
        mark: dict[str, Any] = {"t": time.perf_counter(), "io": dict(meter.io), "cands": len(meter.candidates)}

        def measured_done(ended: Any) -> None:
            started_io = dict(meter.io)
            done(ended)  # conclude: reads what the run recorded, the regression check, the entry's final row
            now = time.perf_counter()
            meter.problems.append(dict(
                index=len(meter.problems), entry=ended.job.entry.name, completed=ended.completed,
                wall_s=now - mark["t"], candidates=len(meter.candidates) - mark["cands"],
                parts_read_run=started_io["parts_read"] - mark["io"]["parts_read"]
                - sum(c["parts_read"] for c in meter.candidates[mark["cands"]:]),
                parts_written_run=started_io["parts_written"] - mark["io"]["parts_written"],
                parts_read_conclude=meter.io["parts_read"] - started_io["parts_read"],
                read_s_conclude=meter.io["read_s"] - started_io["read_s"], t_end_s=round(meter.now(), 2)))
            mark.update(t=now, io=dict(meter.io), cands=len(meter.candidates))

        local(jobs, measured_done)

    campaign.local = measured_local  # campaign.py calls its imported name


def tree(root: Path) -> dict:
    files = [p for p in root.rglob("*") if p.is_file()]
    parts = [p for p in files if p.name.startswith("part-")]
    return dict(bytes=sum(p.stat().st_size for p in files), files=len(files), table_parts=len(parts),
                table_bytes=sum(p.stat().st_size for p in parts),
                blobs=sum(1 for p in files if "blobs" in p.relative_to(root).parts),
                work_files=sum(1 for p in files if "work" in p.relative_to(root).parts))


def check(store_root: Path, result: dict, n_problems: int, candidates: int) -> dict:
    """What must hold however slow the machine: every candidate recorded exactly once, every problem finished."""
    import pandas as pd

    from kernelflow.artifacts.campaigns import entries
    from kernelflow.artifacts.store import Store

    store = Store(store_root)
    rows = entries(store, result["campaign_id"])
    run_ids = list(rows.optimize_run_id.dropna())
    per_run, issues = {}, []
    for run_id in run_ids:
        counts = {t: store.read(t, run_id) for t in ("candidates", "compiles", "verifications", "benchmarks")}
        ids = counts["candidates"].get("id", pd.Series(dtype=str))
        per_run[run_id] = {t: len(f) for t, f in counts.items()}
        if len(ids) != candidates or ids.nunique() != len(ids):
            issues.append(f"{run_id}: {len(ids)} candidates rows, {ids.nunique()} distinct (want {candidates})")
        for t in ("compiles", "verifications", "benchmarks"):
            got = counts[t].get("candidate_id", pd.Series(dtype=str))
            if sorted(got) != sorted(ids):
                issues.append(f"{run_id}: {t} rows for {len(got)} candidates ({got.nunique()} distinct)")
    verified = sum(int((store.read("verifications", r).status == "ok").sum()) for r in run_ids)
    return dict(n_entries=len(rows), n_finished=int((rows.status == "finished").sum()), n_runs=len(run_ids),
                n_candidates_recorded=sum(r["candidates"] for r in per_run.values()), n_verified=verified,
                issues=issues, ok=not issues and len(rows) == n_problems and bool((rows.status == "finished").all()))


def fit(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of ys over xs."""
    if len(xs) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else None


def summarize(meter: Meter) -> dict:
    cands = meter.candidates
    tenth = max(1, len(cands) // 10)
    idx = [float(c["index"]) for c in cands]

    def med(rows: list[dict], key: str) -> float:
        return statistics.median(r[key] for r in rows) if rows else float("nan")

    out: dict[str, Any] = {"n_candidates_measured": len(cands)}
    for key in ("wall_s", "overhead_s", "stage_s", "compile_s", "verify_s", "benchmark_s", "profile_s", "write_s",
                "read_s", "parts_read", "parts_written"):
        out[key] = dict(first_10pct_median=med(cands[:tenth], key), last_10pct_median=med(cands[-tenth:], key),
                        median=med(cands, key), total=sum(c[key] for c in cands),
                        slope_per_candidate=fit(idx, [float(c[key]) for c in cands]))
    if len(cands) > 2:  # the same slope with the candidate's stage time as a covariate: on a shared machine the load
        import numpy as np  # moves stage time and overhead together

        x = np.c_[np.ones(len(cands)), idx, [c["stage_s"] for c in cands]]
        for key in ("overhead_s", "write_s"):
            coef = np.linalg.lstsq(x, np.array([c[key] for c in cands]), rcond=None)[0]
            out[key]["slope_per_candidate_at_equal_stage_time"] = float(coef[1])
    later = [c for c in cands if c["in_run"] > 1]  # a run's first candidate also carries the run's set-up reads
    out["parts_read_per_candidate_after_first"] = dict(max=max((c["parts_read"] for c in later), default=0),
                                                        slope_vs_store_parts=fit([float(c["store_parts_before"]) for c in later],
                                                                                 [float(c["parts_read"]) for c in later]))
    probs = meter.problems
    out["per_problem"] = dict(
        wall_s_first=[round(p["wall_s"], 2) for p in probs[:3]], wall_s_last=[round(p["wall_s"], 2) for p in probs[-3:]],
        parts_read_conclude_first=probs[0]["parts_read_conclude"] if probs else None,
        parts_read_conclude_last=probs[-1]["parts_read_conclude"] if probs else None,
        parts_read_conclude_slope=fit([float(p["index"]) for p in probs], [float(p["parts_read_conclude"]) for p in probs]),
        parts_read_run_first=probs[0]["parts_read_run"] if probs else None,
        parts_read_run_last=probs[-1]["parts_read_run"] if probs else None)
    rss = [s["rss_kb"] for s in meter.samples]
    quarter = max(1, len(cands) // 4)
    at = {c["index"]: c["rss_kb"] for c in cands}
    out["memory"] = dict(
        rss_mb_start=rss[0] / 1024, rss_mb_end=rss[-1] / 1024, rss_mb_max=max(rss) / 1024,
        hwm_mb=meter.samples[-1]["hwm_kb"] / 1024,
        children_rss_mb_max=max(s["children_rss_kb"] for s in meter.samples) / 1024,
        children_rss_mb_end=meter.samples[-1]["children_rss_kb"] / 1024,
        rss_mb_after_first_quarter=at[quarter - 1] / 1024 if cands else None,
        rss_kb_slope_per_candidate_after_first_quarter=fit([float(c["index"]) for c in cands[quarter:]],
                                                           [float(c["rss_kb"]) for c in cands[quarter:]]))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems", type=int, default=50)
    parser.add_argument("--candidates", type=int, default=20, help=f"per problem, at most {len(GRID)}")
    parser.add_argument("--executor", choices=["inline", "subprocess"], default="inline")
    parser.add_argument("--profile", action="store_true", help="profile promoted candidates (CPU: analytic roofline)")
    parser.add_argument("--workdir", help="suite, problems and store go here (default: a new temporary directory)")
    parser.add_argument("--out", help="the JSON result (default: WORKDIR/load.json)")
    parser.add_argument("--history", type=int, default=0, metavar="RUNS", help="earlier runs already in the store "
                        "(runs-table rows of another problem, two parts each), as after many nights")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between memory samples")
    parser.add_argument("--reps", type=int, nargs=2, metavar=("MIN", "MAX"), help="timing repetitions per contender "
                        "and shape (default: the benchmark stage's own, 20..300 until the interval is within 2%%)")
    parser.add_argument("--timing-budget-s", type=float, default=30.0, help="with --reps: seconds per shape at most")
    parser.add_argument("--families", metavar="A,B", help="the template families each run asks at its start (the "
                        "coverage in its runs row; the load-grid proposer renders elementwise alone), a comma list; "
                        "default all, as a campaign of the builtin proposer does")
    args = parser.parse_args(argv)
    if not 1 <= args.candidates <= len(GRID):
        parser.error(f"--candidates must be 1..{len(GRID)}")
    where = Path(args.workdir or tempfile.mkdtemp(prefix="kf-load-")).resolve()
    where.mkdir(parents=True, exist_ok=True)
    # before prefect and triton are imported: a fresh Prefect home (ephemeral server) unless an API is configured,
    # Triton's interpreter for CPU tensors, the flow's progress lines without per-task state lines
    os.environ.setdefault("PREFECT_HOME", str(where / "prefect"))
    os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")  # a loaded 2-core machine
    os.environ.setdefault("PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ["TRITON_INTERPRET"] = "1"
    sys.path.insert(0, str(ROOT))
    from kernelflow.stages.proposers import PROPOSERS

    PROPOSERS["load-grid"] = grid_proposer
    suite = write_suite(where, args.problems, args.candidates, args.executor, args.profile,
                        args.families.split(",") if args.families else None)
    if args.history:
        history(where / "store", args.history)
    out = Path(args.out or where / "load.json")
    meter = Meter(args.sample_s, lambda: out.write_text(json.dumps(dict(
        partial=True, summary=summarize(meter), candidates=meter.candidates, problems_measured=meter.problems,
        samples=meter.samples, io=meter.io), indent=1, default=str)))
    if args.reps:
        quick_timing(args.reps[0], args.reps[1], args.timing_budget_s)
    instrument(meter)
    instrument_problems(meter)
    from kernelflow.flows.campaign import campaign

    meter.start()
    started = time.perf_counter()
    result = campaign(str(suite), store=str(where / "store"))
    wall = time.perf_counter() - started
    meter.stop()
    import pandas
    import prefect
    import pyarrow

    store_root = Path(result["store"])
    report = dict(
        problems=args.problems, candidates_per_problem=args.candidates, executor=args.executor, profile=args.profile,
        families=args.families,
        history_runs=args.history, reps=args.reps, timing_budget_s=args.timing_budget_s if args.reps else None,
        campaign_id=result["campaign_id"], workdir=str(where), wall_s=wall,
        versions=dict(python=sys.version.split()[0], prefect=prefect.__version__, pandas=pandas.__version__,
                      pyarrow=pyarrow.__version__),
        checks=check(store_root, result, args.problems, args.candidates), store=tree(store_root),
        prefect_db_mb=_size_mb(prefect_db()), io=meter.io,
        summary=summarize(meter), candidates=meter.candidates, problems_measured=meter.problems,
        samples=meter.samples)
    out.write_text(json.dumps(report, indent=1, default=str))
    s, c = report["summary"], report["checks"]
    print(f"\nload: {args.problems} problems x {args.candidates} candidates ({args.executor}) in {wall:.0f} s; "
          f"{c['n_finished']}/{c['n_entries']} finished, {c['n_candidates_recorded']} candidates recorded, "
          f"{c['n_verified']} verified; checks {'ok' if c['ok'] else 'FAILED: ' + '; '.join(c['issues'][:5])}")
    for key in ("wall_s", "overhead_s", "stage_s", "compile_s", "verify_s", "benchmark_s", "write_s", "read_s",
                "parts_read"):
        row = s[key]
        at_load = row.get("slope_per_candidate_at_equal_stage_time")
        print(f"  per candidate {key:12s} first 10% {row['first_10pct_median']:.4f}  last 10% "
              f"{row['last_10pct_median']:.4f}  slope {row['slope_per_candidate'] or 0:+.2e}/candidate"
              + (f" ({at_load:+.2e} at equal stage time)" if at_load is not None else ""))
    m = s["memory"]
    print(f"  RSS {m['rss_mb_start']:.0f} -> {m['rss_mb_end']:.0f} MB (max {m['rss_mb_max']:.0f}, VmHWM "
          f"{m['hwm_mb']:.0f}); children max {m['children_rss_mb_max']:.0f} MB; slope after the first quarter "
          f"{m['rss_kb_slope_per_candidate_after_first_quarter'] or 0:+.1f} kB/candidate")
    p = s["per_problem"]
    print(f"  per problem: conclude reads {p['parts_read_conclude_first']} -> {p['parts_read_conclude_last']} parts; "
          f"run reads {p['parts_read_run_first']} -> {p['parts_read_run_last']} parts")
    st = report["store"]
    print(f"  store: {st['bytes'] / 2**20:.1f} MB, {st['files']} files ({st['table_parts']} table parts, "
          f"{st['blobs']} blobs, {st['work_files']} work files); Prefect db {report['prefect_db_mb'] or 0:.1f} MB")
    print(f"  result: {out}")
    return 0 if c["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
