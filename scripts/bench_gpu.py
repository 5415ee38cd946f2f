"""`make bench-gpu`: the optimize flow over problems/ on the GPU, resumable in chunks; writes BENCHMARKS.md data.

Each problem's summary lands in bench/results/<problem>.json as soon as it finishes, so a run cut short by a
10-minute limit resumes where it stopped (`--only`, `--skip-done`). `--render` rebuilds the BENCHMARKS.md
tables from those files. Numbers come from the artifact store of the runs (baselines and timings tables; the
profiles and feedback tables for the best candidate and the baselines: class, tools fired, SOL fraction, energy).

`--profile-only` adds those profiles to results that lack them without searching again: the best candidate is
rebuilt from its family and parameters (its id must match the one benchmarked, else the entry says so), compiled,
then the candidate, eager and torch.compile are each profiled (stages/profile.py: time, NVML energy, Nsight
Compute counters) and refined, one at a time, in stage processes. Each profile is also kept as a small JSON file
(bench/profiles/<problem>.<contender>.json, stages/measure/captured.py) so that `--rerefine` re-derives the cells with
the current tools, offline.

Profiles are taken on the problem's first GPU workload unless `--workload` names another: a workload name (gpu2; a
problem without it is skipped), or `worst`, each problem's workload where the best candidate is slowest against the
faster baseline (`worst_workload`, from the result's medians). The first workload's cells stay under "profiles";
another's go to "workload_profiles"[workload], its files to bench/profiles/<problem>.<workload>.<contender>.json.

`--max-autotune` times the best candidate beside eager, torch.compile, torch.compile(mode="max-autotune") and
mode="max-autotune-no-cudagraphs" in one benchmark process per problem (max-autotune's compilation and autotuning
take minutes, so it is opt-in and bounded by --autotune-timeout; a timeout or failure is recorded, not dropped). Both
max-autotune modes, because the first replays a CUDA graph, which copies every fresh input into the graph's own
buffers first: with inputs that change between calls, as the benchmark's do, that copy can cost more than the kernel.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

from chunk import Chunk  # noqa: E402

from kernelflow.artifacts.leaderboard import leaderboard  # noqa: E402
from kernelflow.artifacts.store import Store  # noqa: E402
from kernelflow.flows.recorder import Recorder  # noqa: E402

if TYPE_CHECKING:
    from kernelflow.stages.contracts import Baseline, Candidate, Contender, Device, Problem


def summarize(store: Store, run_id: str, problem_id: str, wall_s: float) -> dict:
    runs = store.runs()
    record = runs[runs.run_id == run_id].iloc[0].to_dict()
    best = record.get("best_candidate_id")
    best = best if isinstance(best, str) else None  # a run with no verified candidate stores NaN
    bench = store.read("benchmarks", run_id)
    timings, base = store.read("timings", run_id), store.read("baselines", run_id)
    out: dict = {"problem": problem_id, "run_id": run_id, "stop_reason": record["stop_reason"],
                 "n_candidates": int(record["n_candidates"]), "n_verified": int(record["n_verified"]),
                 "wall_s": round(wall_s, 1), "best": best, "workloads": {},
                 "winner_note": record.get("winner_note") if isinstance(record.get("winner_note"), str) else None,
                 "compile_specialized": True}  # torch.compile per shape (stages/harness/instantiate.py baseline, 2026-12-01)
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
    out["profiles"] = profiles_of(store, run_id, best)
    board = leaderboard(store, run_id)  # every candidate tried: family, parameters, status or failure reason
    out["leaderboard"] = json.loads(board.to_json(orient="records"))
    if not base.empty:
        p = base.iloc[0]
        out["provenance"] = {k.removeprefix("provenance_"): (None if isinstance(v, float) and math.isnan(v) else v)
                             for k, v in p.items() if k.startswith("provenance_")}
    return out


def profile_cell(p: dict, bound: str | None, findings: list[dict]) -> dict:
    """What BENCHMARKS.md shows of one profile: class, tools fired (a consequence as 'tool<cause'), SOL, energy."""
    return {"workload": p["workload"], "status": p["status"], "counters": p["counters"],
            "bound": bound or p.get("bound"), "sol_fraction": p.get("sol_fraction"),
            "energy_j_per_call": p.get("energy_j_per_call"), "time_us": p.get("time_us"),
            "tools": [f["tool"] + (f"<{f['explained_by']}" if f.get("explained_by") else "")
                      + (" (library kernel)" if f.get("not_own") else "") for f in findings],
            "note": "" if p["status"] == "ok" and p["counters"] == "ncu" else
            (p.get("message") or "")[:160] + " " + (p.get("counters_reason") or "")[:160]}


def profiles_of(store: Store, run_id: str, best: str | None) -> dict:
    """The run's last profile of the best candidate and of each baseline, with their feedback."""
    profiles, feedback = store.read("profiles", run_id), store.read("feedback", run_id)
    out: dict = {}
    if profiles.empty or "contender" not in profiles:  # a run from before baselines were profiled
        return out
    for who in ("candidate", "eager", "compile"):
        rows = profiles[(profiles.contender == who) & ((profiles.candidate_id == best) | (who != "candidate"))]
        if rows.empty:
            continue
        p = rows.iloc[-1].to_dict()
        fb = feedback[(feedback.contender == who) & (feedback.candidate_id == p["candidate_id"])] \
            if not feedback.empty else feedback
        last = fb.iloc[-1].to_dict() if not fb.empty else {}
        out[who] = profile_cell(p, last.get("bound"), json.loads(last.get("findings") or "[]"))
    return out


CONTENDERS = ("candidate", "eager", "compile")


def profile_only(args: argparse.Namespace) -> None:
    """Profiles for results that lack them, on the workload --workload picks (see the module doc)."""
    import torch

    from kernelflow.flows.steps import Steps
    from kernelflow.stages.measure import captured
    from kernelflow.stages.problems.kernelbench import load_problem

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None  # None: a CPU dry run
    device: Device = "cuda" if gpu else "cpu"
    store = Store(args.store)
    problems: dict[str, Problem] = {}

    def target(problem_id: str, data: dict) -> tuple[str | None, str, str]:
        """(the workload to profile, None to skip; the line saying why; the problem's first GPU workload)"""
        if problem_id not in problems:
            problems[problem_id] = load_problem(ROOT / "problems" / f"{problem_id}.py")
        names = [w.name for w in problems[problem_id].gpu_workloads]
        return *target_workload(names, data, args.workload), names[0]

    def stored(problem_id: str, data: dict) -> dict | None:
        workload, _, first = target(problem_id, data)
        return None if workload is None else profiles_in(data, None if workload == first else workload)

    for dest, data in pending(args, stored):
        started = time.monotonic()
        workload, why, first = target(dest.stem, data)
        problem = problems[dest.stem]
        if why:
            print(f"{dest.stem}: {why}", flush=True)
        if workload is None:
            continue
        slot = None if workload == first else workload  # None: the first workload, stored as before --workload
        steps = Steps(Recorder(store, f"profile-only-{dest.stem}" + (f"-{slot}" if slot else "")), timeout_s=300.0)
        cand, compiled, out = rebuild(problem, data), None, {}
        subjects: list[tuple[Contender, Candidate | None]] = [("eager", None), ("compile", None)]
        if cand is not None:
            compiled = steps.compile(problem, cand)
            subjects.insert(0, ("candidate", cand))
        for contender, subject in subjects:
            res = steps.profile(problem, subject, device, contender=contender, workload=workload)
            own = subject is not None and compiled is not None and compiled.status == "ok"
            record = sidecar(Path(args.results), dest.stem, contender, slot)
            captured.dump(record, problem.path, gpu, res, subject, compiled.kernels if own and compiled else [],
                          library_calls=compiled.library_calls if own and compiled else [])
            out[contender] = cell_of(record)
            print(f"{dest.stem} {workload} {contender}: {json.dumps(out[contender])}", flush=True)
        put_profiles(data, slot, out)
        wall = round(time.monotonic() - started, 1)
        if slot is None:
            data["profile_wall_s"] = wall
        else:
            data.setdefault("workload_profile_wall_s", {})[slot] = wall
        dest.write_text(json.dumps(data, indent=1, default=str))  # on the GPU machine: tar bench/ into $OUT


def worst_workload(result: dict) -> tuple[str, float] | None:
    """The workload of a result (bench/results/<problem>.json) where its best candidate fares worst against the
    faster baseline, with that ratio: the largest candidate median / min(eager median, torch.compile median) over
    its workloads (above 1: a baseline is faster), those of the max-autotune call when it compiled every shape
    specialized (the search's own medians of torch.compile were shape-generic after the first shape before
    2026-12-01). Workloads lacking any of the three medians are left out; None when none is left (no workloads, or
    no candidate timed). A tie goes to the first workload by name."""
    from kernelflow.stages.measure.objective import weakest

    tuned = result.get("max_autotune") or {}
    timed = tuned["workloads"] if tuned.get("specialized") and tuned.get("workloads") else result.get("workloads", {})
    return weakest({w: {k: t[k][0] for k in ("candidate", "eager", "compile")} for w, t in sorted(timed.items())
                    if all(t.get(k) for k in ("candidate", "eager", "compile"))})


def target_workload(workloads: list[str], data: dict, wanted: str | None) -> tuple[str | None, str]:
    """The workload --profile-only profiles a result on, among its problem's GPU `workloads` (in order), and a line
    to print (empty: nothing to say): the first without --workload, the one named, or the worst (worst_workload);
    None when the problem is skipped, the line saying why."""
    if wanted is None:
        return workloads[0], ""
    if wanted == "worst":
        if (worst := worst_workload(data)) is None:
            return None, "skipped: no workload with the best candidate, eager and torch.compile all timed"
        name, ratio = worst
        if name not in workloads:
            return None, f"skipped: its worst workload {name} is not among the problem's ({', '.join(workloads)})"
        return name, f"worst workload {name}: best candidate {ratio:.2f}x the faster baseline's median"
    if wanted not in workloads:
        return None, f"skipped: no GPU workload {wanted} (it has {', '.join(workloads)})"
    return wanted, ""


def profiles_in(data: dict, slot: str | None) -> dict:
    """A result's profile cells of one workload ({} if none): slot None is the problem's first GPU workload, kept
    under "profiles" as before --workload; another workload's are under "workload_profiles"[slot]."""
    return (data.get("profiles") if slot is None else data.get("workload_profiles", {}).get(slot)) or {}


def put_profiles(data: dict, slot: str | None, cells: dict) -> None:
    """Store a workload's profile cells where profiles_in reads them."""
    if slot is None:
        data["profiles"] = cells
    else:
        data.setdefault("workload_profiles", {})[slot] = cells


def pending(args: argparse.Namespace, key: str | Callable[[str, dict], dict | None],
            done: Callable[[dict], bool] = bool) -> Iterator[tuple[Path, dict]]:
    """The selected results (and their data) whose entry is missing or not `done` (all of them without
    --skip-done), while --max-minutes admits them (scripts/chunk.py). The entry: data[key], or key(problem id, data)
    for a function."""
    chunk = Chunk(args.max_minutes)
    for dest in selected(sorted(Path(args.results).glob("*.json")), args.only):
        data = json.loads(dest.read_text())
        entry = key(dest.stem, data) if callable(key) else data.get(key)
        if args.skip_done and entry and done(entry):
            continue
        if not chunk.admits(dest.stem):
            return
        yield dest, data


def rebuild(problem: Problem, data: dict) -> Candidate | None:
    """The benchmarked best candidate, rendered again from its family and parameters (None without one); its id
    is recorded as rebuilt_candidate_id, equal to data["best"] unless the template changed since."""
    import torch

    from kernelflow.stages.contracts import Candidate, Origin
    from kernelflow.stages.proposers import builtin
    from kernelflow.stages.templates import TEMPLATES

    if not data.get("best_origin"):
        return None
    family, params = data["best_origin"][0], json.loads(data["best_origin"][1])
    plan = builtin.plan(family, problem, "cuda" if torch.cuda.is_available() else "cpu")  # as the proposer does
    source = TEMPLATES[family].render(plan, params)
    cand = Candidate.make(problem.id, "triton", source, Origin(kind="builtin", proposer=family, params=params))
    data["rebuilt_candidate_id"] = cand.id
    return cand


TUNED: list[Baseline] = ["eager", "compile", "compile_max", "compile_max_nocg"]


def tuned_all(cell: dict) -> bool:
    """A max-autotune cell that timed every contender of TUNED, torch.compile specialized to each shape. Earlier
    ones lack the no-cudagraphs mode, or timed shape-generic code after the first shape (stages/harness/instantiate.py
    baseline: before 2026-12-01); those, failed ones included, are timed again."""
    return bool(cell.get("specialized")) and (
        cell["status"] != "ok" or all("compile_max_nocg" in t for t in cell["workloads"].values()))


def max_autotune(args: argparse.Namespace) -> None:
    """The best candidate beside eager and torch.compile in its three modes (TUNED) in one benchmark process, for
    results that lack it; max-autotune's compile and autotuning count against --autotune-timeout."""
    from kernelflow.flows.steps import Steps
    from kernelflow.stages.problems.kernelbench import load_problem

    store = Store(args.store)
    for dest, data in pending(args, "max_autotune", tuned_all):
        problem = load_problem(ROOT / "problems" / f"{dest.stem}.py")
        steps = Steps(Recorder(store, f"max-autotune-{dest.stem}"), timeout_s=args.autotune_timeout)
        res = steps.benchmark(problem, rebuild(problem, data), "cuda", "gpu", list(TUNED))
        why = res.message if len(res.message) <= 500 else f"{res.message[:150]} ... {res.message[-350:]}"
        cell: dict = {"status": res.status, "message": why, "wall_s": round(res.duration_s or 0, 1),
                      "specialized": True, "workloads": {}}
        for t in res.timings:
            cell["workloads"].setdefault(t.workload, {})[t.contender] = [t.median_us, t.ci_low_us, t.ci_high_us]
        data["max_autotune"] = cell
        dest.write_text(json.dumps(data, indent=1, default=str))
        print(f"{dest.stem} max-autotune: {res.status} {res.message[:120]}", flush=True)


def render_max_autotune(rows: list[dict]) -> str:
    """Per problem and workload, the max-autotune call's medians (one process: eager, the compile modes, best)."""
    lines = ["| problem | workload | eager us | torch.compile us | max-autotune us | max-autotune-no-cudagraphs us | "
             "best candidate us | x max-autotune | x no-cudagraphs | note |", "|---" * 10 + "|"]
    for r in rows:
        cell = r.get("max_autotune")
        if not cell:
            continue
        if not cell["workloads"]:
            lines.append(f"| {r['problem']} |" + " - |" * 8 + f" {cell['status']}: {cell['message'][:100]} |")
        for i, (w, t) in enumerate(sorted(cell["workloads"].items())):
            lines.append(f"| {r['problem'] if i == 0 else ''} | {w} | {fmt(t.get('eager'))} | {fmt(t.get('compile'))} | "
                         f"{fmt(t.get('compile_max'))} | {fmt(t.get('compile_max_nocg'))} | "
                         f"{fmt(t.get('candidate'))} | {ratio(t, 'compile_max')} | {ratio(t, 'compile_max_nocg')} | "
                         f"{'' if i else cell['status'] + ('' if cell.get('specialized') else GENERIC)} |")
    return "\n".join(lines) if len(lines) > 2 else ""


GENERIC = " (torch.compile shape-generic after the first shape)"  # a cell timed before baseline()'s dynamic=False


def sidecar(results: Path, problem: str, contender: str, slot: str | None = None) -> Path:
    """Where --profile-only keeps a profile for offline re-refinement (stages/measure/captured.py's format): slot None for
    the problem's first GPU workload (<problem>.<contender>.json), else the workload, named in the file."""
    name = f"{problem}.{contender}.json" if slot is None else f"{problem}.{slot}.{contender}.json"
    return results.parent / "profiles" / name


def sidecars(results: Path, problem: str) -> dict[str | None, dict[str, Path]]:
    """A result's captured profiles on disk, by slot (as in sidecar: None, the first workload) and contender."""
    out: dict[str | None, dict[str, Path]] = {}
    for path in sorted((results.parent / "profiles").glob(f"{problem}.*.json")):
        parts = path.name[len(problem) + 1:-len(".json")].split(".")
        slot, who = (None, parts[0]) if len(parts) == 1 else (parts[0], parts[1]) if len(parts) == 2 else (None, "")
        if who in CONTENDERS:
            out.setdefault(slot, {})[who] = path
    return out


def cell_of(record: Path) -> dict:
    """A profile cell from a captured profile: refine runs here, as the flow runs it."""
    from kernelflow.stages import refine
    from kernelflow.stages.measure import captured

    data, ev = captured.load_capture(record)
    profile = ev.profile
    assert profile is not None
    fb = refine.run(refine.RefineRequest(evidence=ev)) if profile.status == "ok" else None
    return profile_cell(profile.model_dump(), fb.bound if fb else None,
                        [f.model_dump() for f in fb.findings] if fb else [])


def captured_id(record: Path) -> str:
    from kernelflow.stages.measure import captured

    return captured.load_capture(record)[1].candidate_id


def rerefine(args: argparse.Namespace) -> None:
    """Re-derive the profile cells of the selected results from their captured profiles (no GPU), on every
    workload that has them: the first's under "profiles", the others' under "workload_profiles"."""
    for dest in selected(sorted(Path(args.results).glob("*.json")), args.only):
        data = json.loads(dest.read_text())
        changed = []
        for slot, records in sidecars(Path(args.results), dest.stem).items():
            cells = {who: cell_of(records[who]) for who in CONTENDERS if who in records}
            where = dest.stem + (f" {slot}" if slot else "")
            if "candidate" in cells and captured_id(records["candidate"]) != data.get("best"):
                print(f"{where}: the captured candidate profile is of another candidate than the best; kept as is")
                cells["candidate"] = profiles_in(data, slot).get("candidate")
                cells = {k: v for k, v in cells.items() if v is not None}
            if cells:
                put_profiles(data, slot, cells)
                changed.append(f"{where}: {', '.join(cells)}")
        if changed:
            dest.write_text(json.dumps(data, indent=1, default=str))
            print("; ".join(changed) + " re-refined")


def selected(paths: list[Path], only: str | None) -> list[Path]:
    return [p for p in paths if not only or any(p.stem.startswith(o) for o in only.split(","))]


def run(args: argparse.Namespace) -> None:
    from kernelflow.flows.config import RunConfig
    from kernelflow.flows.optimize import optimize

    results = Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    problems = selected(sorted((ROOT / "problems").glob("*.py")), args.only)
    chunk = Chunk(args.max_minutes)
    for path in problems:
        dest = results / f"{path.stem}.json"
        if args.skip_done and dest.exists():
            continue
        if not chunk.admits(path.stem):
            break
        started = time.monotonic()
        summary = optimize(str(path.resolve()), RunConfig(
            budget=args.budget, store=args.store, device="cuda", sizes="gpu", wall_time_s=args.wall_time,
            baseline_profiles=not args.no_baseline_profiles))
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
    from kernelflow.stages.measure.ceilings import peaks_for
    from kernelflow.stages.measure.roofline import count_work, sol_floor_us
    from kernelflow.stages.problems.kernelbench import load_problem

    peaks = peaks_for(gpu)
    if peaks is None:
        return {}
    problem = load_problem(ROOT / "problems" / f"{problem_id}.py")
    return {w.name: sol_floor_us(count_work(problem, w), peaks, problem.policy) for w in problem.gpu_workloads}


GENERIC_MARK = " †"
GENERIC_NOTE = ("† timed before 2026-12-01: torch.compile ran shape-generic code on every workload after the "
                "problem's first (stages/harness/instantiate.py baseline), so x torch.compile is biased for the candidate there")


def problem_label(r: dict) -> str:
    """The problem's id, marked when its torch.compile medians after the first workload were shape-generic."""
    return r["problem"] + ("" if r.get("compile_specialized") else GENERIC_MARK)


def render(results: Path) -> str:
    rows = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
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
            lines.append(f"| {problem_label(r) if first else ''} | {w} | {fmt(t.get('eager'))} | {fmt(t.get('compile'))} | "
                         f"{fmt(t.get('candidate'))} | {ratio(t, 'eager')} | {ratio(t, 'compile')} | {sol} | {origin} | "
                         f"{tried} |")
        if not r["workloads"]:
            lines.append(f"| {r['problem']} | - | - | - | - | - | - | - | {r['stop_reason'][:80]} | 0/0 |")
    if any(not r.get("compile_specialized") for r in rows):
        lines += ["", GENERIC_NOTE]
    tuned = render_max_autotune(rows)
    return "\n".join(lines) + "\n\n" + render_results(rows) + "\n\n" + render_profiles(rows) + (
        "\n\n" + tuned if tuned else "")


def is_fusion(problem_id: str) -> bool:
    """A fusion problem says so in its docstring ("Fusion: ..."); the others are single operations."""
    return "\nFusion:" in (ROOT / "problems" / f"{problem_id}.py").read_text()


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def result_of(r: dict) -> dict | None:
    """One problem under the seeds rule (artifacts/winner.py), from its medians: the best candidate's geomean
    speedups, torch.compile's over eager, and the winner; None without a timed eager and torch.compile."""
    ws = [t for t in r["workloads"].values() if "eager" in t and "compile" in t]
    if not ws:
        return None
    compile_e = geomean([t["eager"][0] / t["compile"][0] for t in ws])
    out = {"fusion": is_fusion(r["problem"]), "compile_vs_eager": compile_e, "cand_vs_eager": None,
           "cand_vs_compile": None}
    speeds = {"eager": 1.0, "torch.compile": compile_e}
    if all("candidate" in t for t in ws):
        out["cand_vs_eager"] = geomean([t["eager"][0] / t["candidate"][0] for t in ws])
        out["cand_vs_compile"] = geomean([t["compile"][0] / t["candidate"][0] for t in ws])
        speeds["candidate"] = out["cand_vs_eager"]
    best_baseline = max(("eager", "torch.compile"), key=lambda k: speeds[k])
    out["winner"] = "candidate" if speeds.get("candidate", 0.0) > speeds[best_baseline] else best_baseline
    out["result_vs_compile"] = speeds[out["winner"]] / compile_e
    out["result_vs_eager"] = speeds[out["winner"]]
    return out


def render_results(rows: list[dict]) -> str:
    """Per problem: the best candidate against both baselines, and the run's result under the seeds rule; then
    the geomeans issue 4's targets are stated in (fusion problems and single operations apart)."""
    lines = ["| problem | kind | best candidate x eager | x torch.compile | torch.compile x eager | winner (seeds rule) "
             "| result x torch.compile |", "|---|---|---|---|---|---|---|"]
    done = [(problem_label(r), res) for r in rows if (res := result_of(r))]
    for pid, res in done:
        cand = (f"{res['cand_vs_eager']:.2f} | {res['cand_vs_compile']:.2f}" if res["cand_vs_eager"] else "- | -")
        lines.append(f"| {pid} | {'fusion' if res['fusion'] else 'single op'} | {cand} | {res['compile_vs_eager']:.2f} "
                     f"| {res['winner']} | {res['result_vs_compile']:.2f} |")
    lines.append("")
    for label, group in (("fusion", [x for _, x in done if x["fusion"]]),
                         ("single op", [x for _, x in done if not x["fusion"]])):
        cands = [x for x in group if x["cand_vs_eager"]]
        if not group:
            continue
        line = f"- {label} problems ({len(group)}, {len(cands)} with a verified candidate): "
        if cands:
            faster = sum(x["cand_vs_eager"] > 1 and x["cand_vs_compile"] > 1 for x in cands)
            line += (f"best candidates {geomean([x['cand_vs_eager'] for x in cands]):.2f}x eager, "
                     f"{geomean([x['cand_vs_compile'] for x in cands]):.2f}x torch.compile, faster than both on "
                     f"{faster} of {len(group)} ({100 * faster / len(group):.0f}%); ")
        line += (f"results under the seeds rule {geomean([x['result_vs_compile'] for x in group]):.2f}x "
                 f"torch.compile, a baseline wins on {sum(x['winner'] != 'candidate' for x in group)}")
        lines.append(line)
    if any(GENERIC_MARK in pid for pid, _ in done):
        lines.append(GENERIC_NOTE)
    return "\n".join(lines)


def render_profiles(rows: list[dict]) -> str:
    """Per problem, the best candidate and the baselines as profiled: on the first GPU workload, then on each other
    workload --profile-only --workload profiled (by name)."""
    lines = ["| problem | workload | contender | class | tools fired (cause first; x<y: x explained by y) | "
             "SOL fraction | energy mJ/call | time us | note |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        slots = [r.get("profiles") or {}, *(cells for _, cells in sorted(r.get("workload_profiles", {}).items()))]
        for i, (who, c) in enumerate([(who, slot[who]) for slot in slots for who in CONTENDERS if who in slot]):
            sol = f"{c['sol_fraction']:.2f}" if c.get("sol_fraction") is not None else "-"
            mj = f"{c['energy_j_per_call'] * 1e3:.2f}" if c.get("energy_j_per_call") is not None else "-"
            us = f"{c['time_us']:.1f}" if c.get("time_us") is not None else "-"
            label = {"candidate": "best candidate", "eager": "eager", "compile": "torch.compile"}[who]
            counts = Counter(c["tools"])  # one finding per kernel (and per loads/stores): counted, in order
            tools = ", ".join(t + (f" x{counts[t]}" if counts[t] > 1 else "") for t in dict.fromkeys(c["tools"]))
            lines.append(f"| {r['problem'] if i == 0 else ''} | {c['workload']} | {label} | {c.get('bound') or '-'} | "
                         f"{tools or 'none'} | {sol} | {mj} | {us} | {c.get('note', '').strip()} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", help="comma list of problem id prefixes, e.g. 01,02,17")
    ap.add_argument("--budget", type=int, default=2)
    ap.add_argument("--wall-time", type=float, default=300.0, help="per problem, seconds")
    ap.add_argument("--max-minutes", type=float, default=8.0, help="start no problem that would end after this, "
                    "by the longest one so far in this call")
    ap.add_argument("--skip-done", action="store_true")
    ap.add_argument("--no-baseline-profiles", action="store_true", help="search without profiling eager and "
                    "torch.compile (about 70 s a problem saved; --profile-only adds them later)")
    ap.add_argument("--store", default=str(ROOT / "runs-bench"))
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"), help="where the per-problem JSON live")
    ap.add_argument("--render", action="store_true", help="print the BENCHMARKS.md tables from bench/results")
    ap.add_argument("--profile-only", action="store_true", help="profile the best candidate and the baselines of "
                    "results that lack profiles (with --skip-done) or of all selected results; no search")
    ap.add_argument("--workload", help="with --profile-only: the GPU workload to profile on instead of the first (a "
                    "name such as gpu2; problems without it are skipped), or 'worst': per problem, the one where the "
                    "best candidate is slowest against the faster of eager and torch.compile")
    ap.add_argument("--max-autotune", action="store_true", help="time the best candidate beside eager, "
                    "torch.compile and torch.compile(mode='max-autotune') in one process (with --skip-done: only "
                    "results that lack it); no search")
    ap.add_argument("--autotune-timeout", type=float, default=480.0, help="seconds for that call, max-autotune's "
                    "compilation included; past it the problem records the timeout")
    ap.add_argument("--rerefine", action="store_true", help="re-derive the profile cells from bench/profiles/ with "
                    "the current tools (no GPU)")
    a = ap.parse_args()
    if a.workload and not a.profile_only:
        ap.error("--workload goes with --profile-only")
    if a.render:
        print(render(Path(a.results)))
    elif a.profile_only:
        profile_only(a)
    elif a.max_autotune:
        max_autotune(a)
    elif a.rerefine:
        rerefine(a)
    else:
        run(a)
