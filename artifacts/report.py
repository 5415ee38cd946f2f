"""The HTML report of one run or many (a campaign): one self-contained file, from the artifact store alone.

Sections: runs and campaign numbers, with the checks named (`kernelflow verify`/`bench`, artifacts/checks.py) and
their verdicts; speedup trajectory per problem (each candidate's speedup over eager and the best so far, by the order
the run generated them); the funnel generated → compiled → verified → faster than eager; a roofline of the profiled
contenders (achieved FLOP/s against arithmetic intensity, with the GPU's ceilings where stages/measure/peaks.py knows
it); seconds per stage; each run's leaderboard. Charts are inline SVG (artifacts/svg.py) and the page has no script
and fetches nothing, so it opens from a mail or an archive.

    kernelflow report latest --out report.html       # or: RUN_ID ..., --campaign all, --campaign ID,ID
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

import pandas as pd

from kernelflow.artifacts import analysis, checks, fmt, svg
from kernelflow.artifacts.leaderboard import leaderboard
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.winner import winner
from kernelflow.stages.measure.peaks import KNOWN_PEAKS

STAGE_COLORS = {"compile": "#1f77b4", "verify": "#2ca02c", "benchmark": "#ff7f0e", "profile": "#9467bd",
                "llm": "#8c564b"}
CONTENDER_COLORS = {"candidate": "#1f77b4", "eager": "#d62728", "compile": "#2ca02c", "compile_max": "#17becf",
                    "compile_max_nocg": "#9467bd"}
STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1180px; color: #222; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
h3 { font-size: 15px; margin-bottom: 4px; }
table { border-collapse: collapse; margin: 8px 0 16px; font-size: 12.5px; }
th, td { border-bottom: 1px solid #e4e4e4; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } tr.winner td { background: #eaf6ea; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.grid { display: flex; flex-wrap: wrap; gap: 12px; } figure { margin: 0; }
figcaption { font-size: 12.5px; color: #444; max-width: 440px; }
.note { background: #fff7e0; border: 1px solid #f0d080; padding: 6px 10px; }
.empty { color: #777; font-style: italic; }
.legend span { margin-right: 14px; font-size: 12.5px; white-space: nowrap; }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; }
svg text { font: 11px system-ui, sans-serif; fill: #333; } svg text.axis { font-size: 12px; }
"""


def report(store: Store, run_ids: Sequence[str]) -> str:
    """The report of these runs as one HTML document."""
    runs = analysis.load(store, "runs", run_ids)
    cands = analysis.candidates(store, run_ids)
    points = analysis.roofline_points(store, run_ids)
    names = dict(zip(runs.run_id, runs.problem_id, strict=True)) if not runs.empty else {}
    for frame in (cands, points):  # a run without a run record (e.g. profiles alone) is named by its rows
        names.update({r: p for r, p in zip(frame.run_id, frame.problem_id, strict=True) if r not in names})
    problems = sorted(set(names.values()))
    recorded = set(runs.run_id) if not runs.empty else set()
    judged = {r: found for r in run_ids if r not in recorded and (found := checks.checks(store, r))}
    title = f"kernelflow report: {len(run_ids)} run{'s' * (len(run_ids) != 1)}, {len(problems)} " \
            f"problem{'s' * (len(problems) != 1)}"
    body = "".join([
        f"<h1>{escape(title)}</h1><p>store {escape(store.location)}; written "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC</p>",
        _summary(store, run_ids, runs, cands, len(problems), judged),
        _trajectories(store, run_ids, names, cands),
        _funnel(cands),
        _roofline(store, run_ids, points),
        _stage_times(store, run_ids, runs, names),
        _leaderboards(store, run_ids, runs, names, judged),
    ])
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f"<style>{STYLE}</style></head><body>{body}</body></html>\n")


def table(frame: pd.DataFrame, cls: str, highlight: str | None = None, key: str = "candidate_id") -> str:
    """An HTML table of a frame (escaped); the row whose `key` is `highlight` gets class 'winner'."""
    if frame.empty:
        return '<p class="empty">(none)</p>'
    head = "".join(f"<th>{escape(str(c))}</th>" for c in frame.columns)
    rows = []
    for rec in frame.to_dict("records"):
        cells = "".join(_cell(v, str(c)) for c, v in rec.items())
        mark = ' class="winner"' if highlight is not None and rec.get(key) == highlight else ""
        rows.append(f"<tr{mark}>{cells}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _cell(value: object, column: str) -> str:
    """A number as the CLI prints it: microseconds (a column ending in _us) to one decimal, others to 3 significant
    digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return '<td class="num">-</td>'
    if isinstance(value, float):
        return f'<td class="num">{fmt.us(value) if column.endswith("_us") else fmt.sig(value)}</td>'
    return f"<td>{escape(str(value))}</td>"


def _summary(store: Store, run_ids: Sequence[str], runs: pd.DataFrame, cands: pd.DataFrame, n_problems: int,
             judged: dict[str, list[checks.Check]]) -> str:
    out = ['<h2 id="summary">Runs</h2>']
    if not runs.empty and (runs.device == "cpu").any():
        out.append('<p class="note">CPU runs: Triton candidates ran in Triton\'s interpreter, so their times show that '
                   "the pipeline works and say nothing about GPU speed.</p>")
    best = cands[cands.competes].groupby("problem_id").speedup_vs_eager.max() if not cands.empty else pd.Series()
    geomean = math.exp(sum(math.log(v) for v in best) / len(best)) if len(best) else None
    out.append(f"<p>{n_problems} problems; {len(best)} with a verified candidate; geomean of the best candidates' "
               f"speedup over eager {'-' if geomean is None else fmt.speedup(geomean)} (over those); fast_1 "
               f"(faster than eager) {int((best > 1.0).sum())}/{n_problems}.</p>")
    unrecorded = [r for r in run_ids if (runs.empty or r not in set(runs.run_id)) and r not in judged]
    if unrecorded:  # e.g. profiles alone, or tables copied without their candidates and runs
        out.append(f'<p class="empty">no run record for {escape(", ".join(unrecorded))}</p>')
    if judged:
        rows = [{"run": c.run_id, "problem": c.candidate.problem_id, "command": f"kernelflow {c.command}",
                 "candidate": c.candidate.id, "file": c.candidate.origin.params.get("path"), "device": c.device,
                 "verdict": c.verdict, "reason": c.reason,
                 "x eager": c.timed.speedup_vs_eager if c.timed else None,
                 "x torch.compile": c.timed.speedup_vs_compile if c.timed else None}
                for found in judged.values() for c in found]
        out.append("<p>Checks of a candidate file by <code>kernelflow verify</code> and <code>bench</code> (no run "
                   "record: their stage rows)</p>" + table(pd.DataFrame(rows), "checks"))
    if runs.empty:
        return "".join(out)
    state = analysis.load(store, "search_state", run_ids)
    strategy = state.groupby("run_id").strategy.last() if not state.empty else pd.Series(dtype=str)
    wall = (pd.to_datetime(runs.updated_at) - pd.to_datetime(runs.started_at)).dt.total_seconds()
    shown = pd.DataFrame({"run": runs.run_id, "problem": runs.problem_id, "device": runs.device,
                          "strategy": runs.run_id.map(strategy), "status": runs.status, "stop reason": runs.stop_reason,
                          "candidates": runs.n_candidates, "verified": runs.n_verified,
                          "best (x eager)": runs.best_speedup_vs_eager, "winner": runs.get("winner"),
                          "winner (x eager)": runs.get("winner_speedup_vs_eager"), "wall s": wall})
    return "".join(out) + table(shown, "runs")


def _trajectories(store: Store, run_ids: Sequence[str], names: dict[str, str], cands: pd.DataFrame) -> str:
    out = ['<h2 id="trajectory">Speedup trajectory</h2><p>Each candidate\'s geomean speedup over eager (dots; a '
           "cross on the axis: not verified) and the best so far (line), in the order the run generated them; "
           "dashed: eager (1x) and torch.compile where timed.</p>"]
    if cands.empty:
        return "".join(out) + '<p class="empty">no candidates</p>'
    figures = []
    for problem, group in cands.groupby("problem_id", sort=True):
        series, hlines, keys = [], [(1.0, "eager", "#d62728")], []
        for i, (run, rows) in enumerate(group.groupby("run_id", sort=False)):
            color = svg.PALETTE[i % len(svg.PALETTE)]
            dots = [(float(r.index), None if pd.isna(r.speedup_vs_eager) else float(r.speedup_vs_eager),
                     f"#{r.index} {r.candidate_id} {r.proposer} {r.params}: " +
                     (f"{fmt.speedup(r.speedup_vs_eager)} eager" if pd.notna(r.speedup_vs_eager) else r.reason))
                    for r in rows.itertuples()]
            best = rows.best_so_far.ffill()
            steps = [(float(x), float(y), f"best so far {fmt.speedup(y)}") for x, y in zip(rows["index"], best, strict=True)
                     if pd.notna(y)]
            series += [svg.Series(f"{run} candidates", dots, color), svg.Series(f"{run} best", steps, color, "step",
                                                                                 markers=False)]
            keys.append((run, color))
            won = winner(store, str(run))
            if won and "compile" in won.baselines and i == 0:
                hlines.append((won.baselines["compile"], "torch.compile", "#2ca02c"))
        best_all = group.speedup_vs_eager.where(group.competes).max()
        caption = f"{problem}: best {fmt.speedup(best_all)} eager" if pd.notna(best_all) else f"{problem}: nothing verified"
        figures.append(f'<figure class="trajectory" data-problem="{escape(str(problem))}">' +
                       svg.chart(series, x_label="candidate", y_label="speedup vs eager (x)", log_y=True,
                                 integer_x=True, hlines=hlines, label=f"speedup trajectory of {problem}") +
                       f"<figcaption>{escape(caption)}</figcaption>" +
                       (svg.legend(keys) if len(keys) > 1 else "") + "</figure>")
    return "".join(out) + f'<div class="grid">{"".join(figures)}</div>'


def _funnel(cands: pd.DataFrame) -> str:
    out = ['<h2 id="funnel">Funnel</h2>']
    if cands.empty:
        return "".join(out) + '<p class="empty">no candidates</p>'
    counts = analysis.funnel(cands)
    total = counts["generated"] or 1
    rows = [svg.Bar(stage, [(stage, n, "#1f77b4")], f"{n} ({100 * n / total:.0f}%)") for stage, n in counts.items()]
    per_problem = pd.DataFrame([{"problem": p, **analysis.funnel(g)} for p, g in cands.groupby("problem_id")])
    return "".join(out) + '<figure class="funnel">' + svg.bars(rows, unit="candidates", label="funnel") + \
        "</figure>" + table(per_problem, "funnel")


def _roofline(store: Store, run_ids: Sequence[str], points: pd.DataFrame) -> str:
    out = '<h2 id="roofline">Roofline</h2>'
    if points.empty:
        return out + ('<p class="empty">no profiles with a measured time in these runs (a CPU run profiles '
                      "analytically: counted work and SOL floor, no time); profile on a GPU for a roofline.</p>")
    gpus = set(analysis.gpu_names(store, run_ids).values())
    return out + roofline_figure(points, gpus.pop() if len(gpus) == 1 else None)


def roofline_figure(points: pd.DataFrame, gpu: str | None) -> str:
    """The roofline of `analysis.roofline_points`, with the ceilings of `gpu` where stages/measure/peaks.py knows them."""
    series = []
    for contender, rows in points.groupby("contender", sort=True):
        dots = [(float(r.intensity), float(r.achieved_flops_per_s),
                 f"{r.problem_id} {r.candidate_id} {r.workload}: {r.time_us:.1f} us, {r.intensity:.3g} FLOP/B, "
                 f"{svg.fmt(r.achieved_flops_per_s)}FLOP/s, {svg.fmt(r.achieved_bytes_per_s)}B/s, SOL fraction "
                 f"{r.sol_fraction:.2f}, {r.bound} ({r.bound_source})") for r in rows.itertuples()]
        series.append(svg.Series(str(contender), dots, CONTENDER_COLORS.get(str(contender), "#7f7f7f")))
    peaks = KNOWN_PEAKS.get(gpu or "")
    caption = "Achieved FLOP/s (counted work / measured time; pointwise ops count 1) against counted FLOPs per byte " \
              "that must move."
    if peaks is not None:
        lo, hi = points.intensity.min() / 2, points.intensity.max() * 2
        for name, peak, color in (("fp32", peaks.fp32_flops_per_s, "#555"),
                                  ("bf16 tensor cores", peaks.bf16_tensor_flops_per_s, "#999")):
            ridge = peak / peaks.dram_bytes_per_s
            roof = [(lo, lo * peaks.dram_bytes_per_s, ""), (ridge, peak, ""), (max(hi, 2 * ridge), peak, "")]
            series.append(svg.Series(f"{name} roof", roof, color, "line", markers=False, dashed=True))
        caption += f" Dashed: {gpu}'s DRAM bandwidth and fp32 / bf16 tensor-core peaks (stages/measure/peaks.py)."
    else:
        caption += (f" No ceilings: {gpu} is not in stages/measure/peaks.py's table." if gpu else " No ceilings: these runs "
                    "record no GPU name (timings' provenance), or several.")
    shown = points[["problem_id", "contender", "candidate_id", "workload", "time_us", "intensity",
                    "achieved_flops_per_s", "achieved_bytes_per_s", "sol_fraction", "bound"]]
    return '<figure class="roofline">' + svg.chart(
        series, x_label="arithmetic intensity (FLOP/byte)", y_label="achieved FLOP/s", log_x=True, log_y=True,
        width=720, height=420, label="roofline") + svg.legend([(s.name, s.color) for s in series]) + \
        f"<figcaption>{escape(caption)}</figcaption></figure>" + table(shown, "profiles")


def _stage_times(store: Store, run_ids: Sequence[str], runs: pd.DataFrame, names: dict[str, str]) -> str:
    out = ['<h2 id="stage-times">Time per stage</h2>']
    times = analysis.stage_times(store, run_ids)
    if times.empty:
        return "".join(out) + '<p class="empty">no stage calls recorded</p>'
    wall = dict(zip(runs.run_id, (pd.to_datetime(runs.updated_at) - pd.to_datetime(runs.started_at))
                    .dt.total_seconds(), strict=True)) if not runs.empty else {}
    rows, shared = [], [p for p in names.values() if list(names.values()).count(p) > 1]
    for run in run_ids:
        mine = times[times.run_id == run]
        total = mine.total_s.sum()
        note = f"{total:.1f} s" + (f" of {wall[run]:.0f} s wall" if run in wall else "")
        label = f"{names.get(run, run)} {run[-6:]}" if names.get(run) in shared else names.get(run, run)
        segments = [(s, float(t), STAGE_COLORS.get(s, "#7f7f7f")) for s, t in zip(mine.stage, mine.total_s, strict=True)]
        rows.append(svg.Bar(label, segments, note))
    overall = times.groupby("stage", sort=False).agg(calls=("calls", "sum"), total_s=("total_s", "sum"),
                                                      max_s=("max_s", "max")).reset_index()
    return "".join(out) + '<figure class="stage-times">' + svg.bars(rows, unit="s", label="seconds per stage") + \
        svg.legend([(s, c) for s, c in STAGE_COLORS.items() if s in set(times.stage)]) + \
        "<figcaption>Stage calls' own durations (compile, verify, benchmark, profile; llm: request latency); the rest "\
        "of the wall time is the flow itself (Prefect, proposals, records).</figcaption></figure>" + \
        table(overall, "stage-times")


def _leaderboards(store: Store, run_ids: Sequence[str], runs: pd.DataFrame, names: dict[str, str],
                  judged: dict[str, list[checks.Check]]) -> str:
    out = ['<h2 id="leaderboard">Leaderboards</h2>']
    notes = dict(zip(runs.run_id, runs.get("winner_note", pd.Series([""] * len(runs))), strict=True)) \
        if not runs.empty else {}
    notes.update({run: "; ".join(c.summary() for c in found) for run, found in judged.items()})
    for run in run_ids:
        won = winner(store, run)
        note = notes.get(run)
        out.append(f'<h3>{escape(names.get(run, run))} <small>{escape(run)}</small></h3>'
                   f"<p>{escape(note if isinstance(note, str) and note else 'winner: not recorded')}</p>" +
                   table(leaderboard(store, run), "leaderboard", won.id if won else None).replace(
                       '<table class="leaderboard">', f'<table class="leaderboard" data-run="{escape(run)}">'))
    return "".join(out)
