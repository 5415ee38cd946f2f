"""`make benchmarks-page`: BENCHMARKS.md, rendered from the benchmark records alone, so the page cannot drift from them.

Reads, each from its own option:
- --results (bench/results/*.json, scripts/bench_gpu.py): per problem its latest search, the best verified candidate
  (family and parameters), and the medians with 95% intervals of the best, eager and torch.compile on every GPU
  shape: those of the search's own benchmark call, and those of the max-autotune call (`max_autotune`), which timed
  the same three again in one process with torch.compile specialized to each shape;
- --floors (bench/sol-floors.json, written by `--write-floors`): the analytic SOL floor of every problem and GPU
  shape, counted from problems/ by stages/measure/roofline.py over the ceilings measured on the GPU
  (bench/ceilings.json);
- --agreement (bench/agreement/*.json, scripts/agreement.py): the exported kernels timed by a re-implementation of
  KernelBench's procedure against kernelflow's medians.

Which medians a problem's rows show (`standing`): the search's own call when its record says torch.compile was
specialized to each shape (`compile_specialized`); else the max-autotune call's, when that call was specialized and
timed the benchmarked best (`rebuilt_candidate_id` equal to `best`); else the search's, marked as shape-generic and
left out of the torch.compile figures. A problem's speedup over a baseline is the geomean over its shapes of the
baseline's median over the best's; the suite's is the geomean over problems. fast_p over a baseline is the share of
problems with a verified best whose speedup is above p. Every number on the page comes from those files; a field a
record lacks is written "not recorded". tests/test_benchmarks_page.py checks that BENCHMARKS.md is this script's
output for the committed records.

`--write-floors` (CPU, needs torch, no GPU) writes the floors file from problems/ and the ceilings file; run it when
a problem's shapes, the roofline's counting or the ceilings change, then render the page again.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from collections import defaultdict
from datetime import date
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NOT_RECORDED = "not recorded"
PS = (1.0, 1.2)  # the p of fast_p
BASELINES = {"eager": "eager", "compile": "torch.compile"}
PROVENANCE = (("device_name", "GPU"), ("driver", "driver"), ("torch", "torch"), ("cuda", "CUDA"),
              ("triton", "Triton"), ("python", "Python"),
              ("sm_clock_mhz", "SM clock MHz read as the search's benchmark began"), ("tf32", "TF32"))
SEARCH, TUNED, GENERIC = "search", "max-autotune call", "search, torch.compile shape-generic"
ABOVE_FLOOR = " *"  # a SOL fraction above 1: the best ran faster than its floor


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def load(directory: Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))] if directory.is_dir() else []


def run_date(r: dict[str, Any]) -> str:
    """The date the search started, from its run id (YYYYMMDDTHHMMSS-...)."""
    stamp = str(r.get("run_id") or "")[:8]
    return f"{stamp[:4]}-{stamp[4:6]}-{stamp[6:]}" if stamp.isdigit() else NOT_RECORDED


def standing(r: dict[str, Any]) -> tuple[dict[str, dict[str, list[float]]], str]:
    """The medians a problem's rows show (workload -> contender -> [median, ci low, ci high]) and the call that timed
    them (module doc)."""
    if r.get("compile_specialized"):
        return r.get("workloads") or {}, SEARCH
    tuned = r.get("max_autotune") or {}
    if tuned.get("specialized") and tuned.get("status") == "ok" and tuned.get("workloads") \
            and r.get("best") and r.get("rebuilt_candidate_id") == r.get("best"):
        return tuned["workloads"], TUNED
    return r.get("workloads") or {}, GENERIC


def problem_row(r: dict[str, Any]) -> dict[str, Any]:
    """One problem: its shapes' medians and ratios, its geomean speedups (None where not timed), its losses."""
    workloads, source = standing(r)
    shapes = []
    for w, t in sorted(workloads.items()):
        best = t.get("candidate") if r.get("best") else None
        ratio = {b: t[b][0] / best[0] if best and t.get(b) else None for b in BASELINES}
        if source == GENERIC:
            ratio["compile"] = None
        shapes.append({"workload": w, "best": best, "eager": t.get("eager"), "compile": t.get("compile"),
                       "ratio": ratio})
    speedup = {}
    for b in BASELINES:
        ratios = [s["ratio"][b] for s in shapes if s["ratio"][b] is not None]
        speedup[b] = geomean(ratios) if ratios and len(ratios) == len(shapes) else None
    origin = r.get("best_origin") or []
    return {"problem": r["problem"], "source": source, "shapes": shapes, "speedup": speedup,
            "family": origin[0] if origin else None, "record": r}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The headline: geomean speedups over problems, fast_p, problems faster than both baselines, losses by shape."""
    rows = [problem_row(r) for r in records]
    out: dict[str, Any] = {"rows": rows, "n_problems": len(rows), "n_shapes": sum(len(x["shapes"]) for x in rows)}
    for b in BASELINES:
        timed = [x["speedup"][b] for x in rows if x["speedup"][b] is not None]
        out[f"geomean_{b}"] = geomean(timed) if timed else None
        out[f"n_timed_{b}"] = len(timed)
        for p in PS:
            out[f"fast_{p}_{b}"] = sum(s > p for s in timed)
    out["faster_than_both"] = sum(all((x["speedup"][b] or 0) > 1 for b in BASELINES) for x in rows)
    out["losses"] = [(x, s, lost) for x in rows for s in x["shapes"]
                     if (lost := [b for b in BASELINES if (s["ratio"][b] or 1) < 1])]
    return out


def fmt_ci(t: list[float] | None) -> str:
    return f"{t[0]:.1f} [{t[1]:.1f}, {t[2]:.1f}]" if t else NOT_RECORDED


def fmt_ratio(x: float | None, digits: int = 2) -> str:
    return f"{x:.{digits}f}" if x is not None else "-"


def share(n: int, of: int) -> str:
    return f"{n} of {of} ({100 * n / of:.0f}%)" if of else "0 of 0"


def sol_cell(floors: dict[str, Any], r: dict[str, Any], shape: dict[str, Any]) -> str:
    """floor / best median where the floors file has this problem and shape for the record's GPU, else '-'."""
    gpu = (r.get("provenance") or {}).get("device_name")
    floor = (floors.get("floors_us", {}).get(r["problem"]) or {}).get(shape["workload"])
    if floor is None or gpu != floors.get("gpu") or not shape["best"]:
        return "-"
    fraction = floor / shape["best"][0]
    return f"{fraction:.2f}" + (ABOVE_FLOOR if fraction > 1 else "")


def profile_note(r: dict[str, Any], workload: str) -> str:
    """What the record's profiles say of this shape (the best candidate's class, SOL fraction and tools fired, the
    baselines' SOL fractions), or '' where no profile of it is recorded."""
    cells = [c for c in (r.get("profiles") or {}, *(r.get("workload_profiles") or {}).values())
             if any((v or {}).get("workload") == workload for v in c.values())]
    if not cells:
        return ""
    cell = cells[0]
    parts = []
    if (cand := cell.get("candidate")) and cand.get("sol_fraction") is not None:
        tools = ", ".join(dict.fromkeys(cand.get("tools") or [])) or "no tool fired"
        parts.append(f"best {cand.get('bound') or 'unclassified'}-bound at {cand['sol_fraction']:.2f} of SOL ({tools})")
    for b, label in BASELINES.items():
        if (c := cell.get(b)) and c.get("sol_fraction") is not None:
            parts.append(f"{label} {c['sol_fraction']:.2f}")
    return "; profiled on this shape: " + ", ".join(parts) if parts else ""


def loss_line(x: dict[str, Any], s: dict[str, Any], lost: list[str]) -> str:
    against = []
    for b in lost:
        overlap = s[b][1] <= s["best"][2] and s["best"][1] <= s[b][2]
        against.append(f"{BASELINES[b]} {s[b][0]:.1f} us ({s['ratio'][b]:.2f}x{', intervals overlap' if overlap else ''})")
    return (f"- {x['problem']} {s['workload']}: best {s['best'][0]:.1f} us against " + " and ".join(against)
            + profile_note(x["record"], s["workload"]) + ".")


def distinct(records: list[dict[str, Any]], value) -> dict[str, list[str]]:
    """value(record) -> the problems that carry it."""
    out: dict[str, list[str]] = defaultdict(list)
    for r in records:
        out[value(r)].append(r["problem"][:2])  # the problem's number
    return dict(out)


def listing(values: dict[str, list[str]], total: int) -> str:
    if len(values) == 1:
        return f"{next(iter(values))} (all {total})"
    return "; ".join(f"{v} ({', '.join(ps)})" for v, ps in sorted(values.items()))


def provenance_lines(records: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[str]:
    def field(key: str):
        return lambda r: str((r.get("provenance") or {}).get(key, NOT_RECORDED))

    lines = ["- " + "; ".join(f"{label} {listing(distinct(records, field(key)), len(records))}"
                              for key, label in PROVENANCE) + "."]
    searches = distinct(records, lambda r: f"{run_date(r)} at {field('code_version')(r)}")
    lines.append("- Searches (date from the run id, commit as the record names it): "
                 + "; ".join(f"{v}: {', '.join(ps)}" for v, ps in sorted(searches.items()))
                 + f"; how each search stopped: {budgets(records)}.")
    by_source = distinct(rows, lambda x: x["source"])
    said = []
    if SEARCH in by_source:
        said.append(f"the search's own call: {', '.join(by_source[SEARCH])}")
    if TUNED in by_source:
        said.append(f"the max-autotune call (its date and commit: {NOT_RECORDED}): {', '.join(by_source[TUNED])}; these "
                    "records are in the older format, without `compile_specialized`: their search timed torch.compile "
                    "shape-generic after the first shape")
    if GENERIC in by_source:
        said.append(f"a search that timed torch.compile shape-generic after the first shape, left out of every "
                    f"torch.compile figure: {', '.join(by_source[GENERIC])}")
    lacking = [r["problem"][:2] for r in records if "leaderboard" not in r]
    lines.append("- Medians from " + "; from ".join(said) + "." + (
        f" Records without the search's leaderboard (every candidate tried): {', '.join(lacking)}." if lacking else ""))
    return lines


def agreement_lines(records: list[dict[str, Any]], where: str) -> list[str]:
    shown = [r for r in records if r.get("status") == "ok" and r.get("device") == "cuda"]
    if not shown:
        return [f"- Independent agreement: no GPU records in {where}."]
    cells = [c for r in shown for c in r["workloads"].values()]
    tolerances = {r.get("tolerance") for r in shown}
    tol = next(iter(tolerances)) if len(tolerances) == 1 and None not in tolerances else None
    if tol is None:
        return [f"- Independent agreement: the records in {where} disagree on their tolerance; see "
                "`python scripts/agreement.py --render`."]
    speedup = sum(abs(c["eager"]["ratio_median"] / c["candidate"]["ratio_median"] - 1) <= tol + 1e-12 for c in cells)
    commits = sorted({str((r.get("provenance") or {}).get("code_version", NOT_RECORDED)) for r in shown})
    rebuilt = [r["problem"][:2] for r in shown if not r.get("rebuilt_is_best")]
    rebuilt_on = f"all {len(shown)} problems" if len(rebuilt) == len(shown) else ", ".join(rebuilt)
    return [f"- Independent agreement ({where}, scripts/agreement.py: each exported best timed by a re-implementation "
            f"of KernelBench's procedure; {len(shown)} problems on {', '.join(sorted({str(r.get('device_name')) for r in shown}))}, "
            f"commit as the records name it {', '.join(commits)}, date {NOT_RECORDED}): median within ±{100 * tol:.0f}% of kernelflow's on "
            f"{sum(c['candidate']['agree'] for c in cells)} of {len(cells)} shapes, eager (the control) on "
            f"{sum(c['eager']['agree'] for c in cells)} of {len(cells)}, the speedup over eager on {speedup} of "
            f"{len(cells)}." + (f" On {rebuilt_on} the template rendered another candidate than the benchmarked best "
                                "(same family and parameters), and both procedures timed that one." if rebuilt else "")]


def budgets(records: list[dict[str, Any]]) -> str:
    """Which budget ended each record's search, as its stop reason says it: 'candidate budget of N spent' is
    `N candidates`, 'wall-time budget of N s spent' is `wall time N s` (with the candidates tried)."""
    def stopped(r: dict[str, Any]) -> str:
        reason = str(r.get("stop_reason") or "")
        if found := re.search(r"candidate budget of (\d+)", reason):
            return f"{found[1]} candidates"
        if found := re.search(r"wall-time budget of ([\d.]+) s", reason):
            return f"wall time {found[1]} s ({r.get('n_candidates', NOT_RECORDED)} tried)"
        return NOT_RECORDED

    found = distinct(records, stopped)
    return "; ".join(f"{b}: {','.join(ps)}" for b, ps in sorted(found.items()))


def render(results: Path, floors_path: Path, agreement: Path) -> str:
    records = load(results)
    floors = json.loads(floors_path.read_text()) if floors_path.is_file() else {}
    s = summarize(records)
    n, rows = s["n_problems"], s["rows"]
    gpus = sorted({str((r.get("provenance") or {}).get("device_name", NOT_RECORDED)) for r in records})
    out = ["# Benchmarks", "",
           f"kernelflow's best verified kernel for each problem of problems/, against eager PyTorch and torch.compile, "
           f"on {', '.join(gpus)}. Generated by `python scripts/benchmarks_page.py --out BENCHMARKS.md` from "
           f"{rel(results)}, {rel(floors_path)} and {rel(agreement)}; do not edit by hand. The history of every "
           "measurement is in docs/LOG.md; the method in docs/METHOD.md.", "", "## Headline", "",
           f"{n} problems, {s['n_shapes']} GPU shapes. A problem's speedup over a baseline is the geomean over its "
           "shapes of the baseline's median over the best candidate's; the suite's is the geomean over problems. "
           "fast_p: the share of problems whose best verified candidate is more than p times as fast as the "
           "baseline.", "",
           "| | x eager | x torch.compile |", "|---|---|---|",
           "| best verified candidate, geomean over problems | "
           + " | ".join(f"{fmt_ratio(s[f'geomean_{b}'])} ({s[f'n_timed_{b}']} problems)" for b in BASELINES) + " |"]
    for p in PS:
        out.append(f"| fast_{p:g} | " + " | ".join(share(s[f"fast_{p}_{b}"], n) for b in BASELINES) + " |")
    above = [f"{x['problem'][:2]} {sh['workload']}" for x in rows for sh in x["shapes"]
             if sol_cell(floors, x["record"], sh).endswith(ABOVE_FLOOR)]
    out += ["", f"- Faster than both baselines: {share(s['faster_than_both'], n)} problems. Shapes where the best "
            f"is slower than a baseline: {len(s['losses'])} of {s['n_shapes']} (Known losses, below).",
            *missing_line(floors, records), *agreement_lines(load(agreement), rel(agreement)), "",
            "## Results", "",
            "The best candidate was verified before it was timed (fresh inputs on every shape against a float64 "
            "reference; its outputs re-checked on timed calls). It was timed in one process with eager and "
            "torch.compile (default mode), interleaved, each call with L2 flushed and CUDA events around it. Medians "
            "in us with distribution-free 95% intervals; x: the baseline's median over the best's; SOL: the analytic "
            "floor (the shape's counted bytes and FLOPs over the GPU's measured ceilings) over the best's median. "
            "docs/METHOD.md has the rules; docs/LOG.md dates each change, so a record older than a rule was timed "
            "without it.", "",
            "| problem (x eager, x torch.compile) | shape | best us [95% CI] | eager us [95% CI] | "
            "torch.compile us [95% CI] | x eager | x torch.compile | SOL | best family |",
            "|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        for i, sh in enumerate(x["shapes"]):
            label = f"{x['problem']} ({fmt_ratio(x['speedup']['eager'], 3)}, {fmt_ratio(x['speedup']['compile'], 3)})"
            out.append(f"| {'' if i else label} | {sh['workload']} | {fmt_ci(sh['best'])} | {fmt_ci(sh['eager'])} | "
                       f"{fmt_ci(sh['compile'])} | {fmt_ratio(sh['ratio']['eager'])} | "
                       f"{fmt_ratio(sh['ratio']['compile'])} | {sol_cell(floors, x['record'], sh)} | "
                       f"{'' if i else x['family'] or 'no verified candidate'} |")
        if not x["shapes"]:
            out.append(f"| {x['problem']} | - | {NOT_RECORDED} | | | | | | {x['family'] or 'no verified candidate'} |")
    if above:
        out += ["", f"SOL above 1 (marked{ABOVE_FLOOR}) on {len(above)} shapes ({', '.join(above)}): the best ran "
                "faster than the floor. The floors' DRAM ceiling (Provenance: a device-to-device copy) is below what "
                "these kernels reach, so the memory-bound fractions on this page read high."]
    out += ["", "## Known losses", "",
            "Each shape where the best candidate's median is above a baseline's, with what a recorded profile of that "
            "shape says. Under the seeds rule (docs/METHOD.md) a run hands back the fastest of its best candidate and "
            "the two baselines over the problem's shapes.", "",
            *(loss_line(*loss) for loss in s["losses"]), "",
            "## Provenance", "", *provenance_lines(records, rows),
            f"- SOL floors: {floors_note(floors, floors_path)}", "",
            "## Reproduce", "",
            "```sh",
            "make bench-gpu    # python scripts/bench_gpu.py --skip-done: searches each problem without a record (GPU)",
            "python scripts/bench_gpu.py --only <problem> --budget <N>  # searches again, overwriting its record",
            "python scripts/bench_gpu.py --max-autotune --skip-done     # the one-process call, per-shape torch.compile",
            "make bench-agreement  # python scripts/agreement.py --skip-done: bench/agreement/",
            "python scripts/benchmarks_page.py --out BENCHMARKS.md  # this page (make benchmarks-page)",
            "```"]
    return "\n".join(out) + "\n"


def missing_line(floors: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """The problems the floors file counts (every problem of problems/) that have no record yet."""
    missing = sorted(set(floors.get("floors_us", {})) - {r["problem"] for r in records})
    return [f"- Not benchmarked yet (no record): {', '.join(missing)}."] if missing else []


def rel(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def floors_note(floors: dict[str, Any], path: Path) -> str:
    if not floors:
        return f"no floors file at {rel(path)}; SOL {NOT_RECORDED}."
    return (f"{rel(path)} (`python scripts/benchmarks_page.py --write-floors`, CPU), for "
            f"{floors.get('gpu', NOT_RECORDED)}: {floors.get('counted_by', NOT_RECORDED)} over "
            f"{floors.get('ceilings', NOT_RECORDED)} ({floors.get('ceilings_source', NOT_RECORDED)}); written "
            f"{floors.get('written', NOT_RECORDED)} with torch {floors.get('torch', NOT_RECORDED)} at "
            f"{floors.get('code_version', NOT_RECORDED)}.")


def write_floors(dest: Path, ceilings: Path, gpu: str) -> None:
    """The SOL floor of every problem's GPU shapes over the ceilings file, as a record (CPU: work counted on meta
    tensors)."""
    import torch

    from kernelflow.stages.measure.peaks import Peaks
    from kernelflow.stages.measure.roofline import count_work, sol_floor_us
    from kernelflow.stages.problems.kernelbench import load_problem

    peaks = Peaks.model_validate_json(ceilings.read_text())
    if not peaks.source.startswith(gpu + ":"):
        sys.exit(f"{ceilings}: its source does not name {gpu!r} ({peaks.source[:80]}...); pass --gpu")
    floors = {}
    for path in sorted((ROOT / "problems").glob("*.py")):
        problem = load_problem(path)
        floors[problem.id] = {w.name: round(sol_floor_us(count_work(problem, w), peaks, problem.policy), 1)
                              for w in problem.gpu_workloads}
    version = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"], cwd=ROOT,
                             capture_output=True, text=True, check=False).stdout.strip() or NOT_RECORDED
    dest.write_text(json.dumps({
        "gpu": gpu, "ceilings": rel(ceilings), "ceilings_source": peaks.source,
        "counted_by": "stages/measure/roofline.py (count_work, sol_floor_us: max of compute and memory time)",
        "torch": torch.__version__, "code_version": version, "written": date.today().isoformat(),
        "floors_us": floors}, indent=1) + "\n")
    print(f"{dest}: {sum(map(len, floors.values()))} shapes of {len(floors)} problems")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(ROOT / "bench" / "results"), help="scripts/bench_gpu.py's records")
    ap.add_argument("--floors", default=str(ROOT / "bench" / "sol-floors.json"), help="the SOL floors record")
    ap.add_argument("--agreement", default=str(ROOT / "bench" / "agreement"), help="scripts/agreement.py's records")
    ap.add_argument("--out", help="write the page here (else print it)")
    ap.add_argument("--write-floors", action="store_true", help="write --floors from problems/ and --ceilings")
    ap.add_argument("--ceilings", default=str(ROOT / "bench" / "ceilings.json"), help="with --write-floors")
    ap.add_argument("--gpu", default="NVIDIA H200", help="with --write-floors: the GPU the ceilings were measured on")
    args = ap.parse_args(argv)
    if args.write_floors:
        write_floors(Path(args.floors), Path(args.ceilings), args.gpu)
        return
    page = render(Path(args.results), Path(args.floors), Path(args.agreement))
    if args.out:
        Path(args.out).write_text(page)
    else:
        print(page, end="")


if __name__ == "__main__":
    main()
