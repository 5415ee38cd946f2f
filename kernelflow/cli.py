"""kernelflow's command line: optimize, problems validate/coverage/roofline, verify, bench, show, report, flush,
export, campaign, deploy, serve.

A user's mistake ends a command with one or two plain lines naming what to fix and exit status 1 (2 for argparse's
usage errors): each command checks what it was given before it starts work (kernelflow/preflight.py), and `main`
turns any exception into lines (preflight.explain). Tracebacks only with --debug or KERNELFLOW_DEBUG=1.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import uuid
import warnings
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from kernelflow.flows.config import RunConfig
    from kernelflow.stages.executors.run import Mode


def _problem_paths(args: list[str]) -> list[Path]:
    """The problems the arguments name: a file or definition folder itself, a directory's .py files and SOL-ExecBench
    definition folders."""
    from kernelflow.stages.problems.solexec import is_definition

    def expand(arg: Path) -> list[Path]:
        if not arg.is_dir() or is_definition(arg):
            return [arg]
        return sorted(arg.glob("*.py")) + sorted(d for d in arg.iterdir() if d.is_dir() and is_definition(d))

    return [p for arg in args for p in expand(Path(arg))]


def cmd_validate(args: argparse.Namespace) -> int:
    from kernelflow.stages.errors import ProblemError
    from kernelflow.stages.problems.kernelbench import check_runs, load_problem
    from kernelflow.stages.problems.solexec import resolve

    paths = _problem_paths(args.paths)
    broken = 0
    for path in paths:
        try:
            problem = load_problem(resolve(path))
            notes = check_runs(problem, "cpu" if problem.cpu_workloads else "gpu")
            print(f"ok      {path}: dtype {problem.dtype}, {len(problem.gpu_workloads)} GPU and "
                  f"{len(problem.cpu_workloads)} CPU shapes; " + "; ".join(notes))
        except ProblemError as e:
            broken += 1
            print(f"BROKEN  {e}")
    print(f"{len(paths)} file{'s' if len(paths) != 1 else ''}: {len(paths) - broken} ok, {broken} broken")
    return 1 if broken else 0


def cmd_coverage(args: argparse.Namespace) -> int:
    from kernelflow.stages.errors import ProblemError
    from kernelflow.stages.problems.solexec import resolve
    from kernelflow.stages.proposers.coverage import Entry, scan, summary

    folders: dict[str, list[Entry]] = {}
    for path in _problem_paths(args.paths):
        try:
            [entry] = scan([Path(resolve(path))])
        except ProblemError as e:  # a SOL-ExecBench definition that does not translate
            entry = Entry(path, path.stem, None, str(e))
        folders.setdefault(str(path.parent), []).append(entry)
        if entry.coverage is None:
            print(f"BROKEN  {entry.error}")
            continue
        matched = entry.coverage.matched
        print(f"{'ok' if matched else 'none':<7} {path}: " + (", ".join(matched) if matched else "no family matches"))
        for family, reason in entry.coverage.refused.items():
            if args.all_reasons or not matched:
                print(f"          {family}: {_clip(reason, args.width)}")
    for folder, entries in folders.items():
        print(summary(folder, entries))
    return 1 if any(e.coverage is None for entries in folders.values() for e in entries) else 0


def _clip(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if width <= 0 or len(text) <= width else text[:width - 3] + "..."


def cmd_roofline(args: argparse.Namespace) -> int:
    """Counted work, SOL floor and bottleneck class per GPU workload; counts in engineering notation."""
    from kernelflow.artifacts.fmt import eng, us
    from kernelflow.stages.errors import ProblemError
    from kernelflow.stages.measure.ceilings import peaks_for
    from kernelflow.stages.measure.peaks import KNOWN_PEAKS
    from kernelflow.stages.measure.roofline import analytic_bound, count_work, sol_floor_us
    from kernelflow.stages.problems.kernelbench import load_problem
    from kernelflow.stages.problems.solexec import resolve

    if args.gpu not in KNOWN_PEAKS or (peaks := peaks_for(args.gpu)) is None:
        print(f"no ceilings known for {args.gpu!r}; known: {', '.join(KNOWN_PEAKS)}", file=sys.stderr)
        return 1
    print(f"{'problem':28} {'workload':8} {'mm GFLOP':>9} {'GFLOP':>9} {'ops/el':>7} {'MB':>8} "
          f"{'floor us':>9} class    ({args.gpu})")
    failed = 0
    for path in _problem_paths(args.paths):
        try:
            problem = load_problem(resolve(path, deferred=True))
            for w in problem.gpu_workloads:
                work = count_work(problem, w)
                print(f"{problem.id:28} {w.name:8} {eng(work.matmul_flops / 1e9):>9} {eng(work.flops / 1e9):>9} "
                      f"{eng(work.pointwise_ops_per_element):>7} {eng(work.bytes_min / 1e6):>8} "
                      f"{us(sol_floor_us(work, peaks)):>9} {analytic_bound(work, peaks)}")
        except ProblemError as e:
            print(e, file=sys.stderr)
            failed += 1
    return 1 if failed else 0


def cmd_verify(args: argparse.Namespace, timed: bool) -> int:
    """`verify` (timed False) and `bench`: a user's candidate file through the run steps (flows/steps.py), recorded as a
    check (artifacts/checks.py) whose run id `show` and `report` take."""
    from kernelflow import preflight

    mode = _executor(args)  # the checks that need no torch first
    source = preflight.candidate_source(args.candidate)
    chosen_baselines = preflight.baselines(args.baselines)
    device = preflight.device(args.device)
    _, problem = preflight.problem(args.problem)
    store = preflight.store(args.store)
    from kernelflow.artifacts import checks
    from kernelflow.artifacts.problem_runs import index, partition
    from kernelflow.flows.recorder import Recorder
    from kernelflow.flows.steps import Steps
    from kernelflow.stages.contracts import Candidate, Origin
    from kernelflow.stages.harness.candidate import backend_of
    from kernelflow.stages.problems import defaults

    command = "bench" if timed else "verify"
    candidate = Candidate.make(problem.id, args.backend or backend_of(source), source, Origin(
        kind="user", proposer="file", params={"path": str(Path(args.candidate).resolve()), "command": command}))
    sizes = args.sizes or defaults.timed_sizes(problem, device)
    run_id = f"{checks.PREFIX}{datetime.now(UTC):%Y%m%dT%H%M%S}-{partition(problem.id)[:170]}-{uuid.uuid4().hex[:6]}"
    steps = Steps(Recorder(store, run_id), mode, args.timeout)
    print(f"run {run_id}: {candidate.backend} candidate {candidate.id} for {problem.id} on {device}, recorded in "
          f"{store.location}", flush=True)
    results: list = [steps.compile(problem, candidate)]
    if results[-1].status == "ok":
        results.append(steps.verify(problem, candidate, device, defaults.verified_sizes(problem, device, sizes)))
    for r in results:
        print(checks.result_line(r))
    if timed and results[-1].status == "ok" and len(results) == 2:
        index(store, problem.id, run_id)  # a run that timed the problem: `kernelflow export` considers it
        results.append(steps.benchmark(problem, candidate, device, sizes, chosen_baselines or defaults.baselines(device),
                                       budget_s=defaults.timing_budget_s(device)))
        print(checks.result_line(results[-1]))
        if results[-1].status == "ok" and results[-1].timings:
            print("\n".join(checks.timing_lines(results[-1])))
    verdict = checks.verdict(results, timed)
    print(verdict, file=sys.stdout if verdict == "VERIFIED" else sys.stderr, flush=True)
    print(f"again with `kernelflow show {run_id} --store {store.location}`")
    return 0 if verdict == "VERIFIED" else 1


def cmd_show(args: argparse.Namespace) -> int:
    """An optimize run's summary and leaderboard, or a check's lines (`verify`/`bench`: artifacts/checks.py); `latest`
    is the optimize run started last."""
    from kernelflow import preflight
    from kernelflow.artifacts import checks, fmt
    from kernelflow.artifacts.leaderboard import baseline_medians, leaderboard, render_board

    store = preflight.store(args.store, reading=True)
    runs = store.runs()
    recorded = list(runs.sort_values("started_at").run_id) if not runs.empty else []
    if args.run != "latest" and checks.is_check(store, args.run, recorded):
        print("\n\n".join("\n".join(check.lines()) for check in checks.checks(store, args.run)))
        return 0
    run_id = recorded[-1] if args.run == "latest" and recorded else args.run
    if run_id not in recorded:
        judged = checks.ids(store, recorded)
        known = "; ".join(f"{what}: {', '.join(ids[-10:])}" + (f" (and {len(ids) - 10} earlier)" if len(ids) > 10 else "")
                          for what, ids in (("optimize runs", recorded), ("verify and bench runs", judged)) if ids)
        wanted = "no optimize run (for 'latest')" if args.run == "latest" else f"no run {run_id!r}"
        print(f"{wanted} in {store.location}; {known}" if known else f"no runs in {store.location}", file=sys.stderr)
        return 1
    r = runs[runs.run_id == run_id].iloc[0]
    print(f"run {run_id}: {r.problem_id} on {r.device} ({r.sizes} shapes), {r.status}: {r.stop_reason}")
    print(f"candidates {r.n_candidates}, verified {r.n_verified}, best {r.best_candidate_id} "
          f"({fmt.speedup(r.best_speedup_vs_eager)} vs eager)")
    note = r.get("winner_note")  # NaN for runs recorded before the seeds rule
    print((note if isinstance(note, str) and note else "winner: not recorded (the run did not finish)") + "\n")
    if r.device == "cpu":
        print("CPU run: Triton candidates ran in Triton's interpreter, so these times show that the pipeline works "
              "and say nothing about GPU speed.\n")
    print(render_board(leaderboard(store, run_id)))
    base = baseline_medians(store, run_id)
    if not base.empty:
        print("\nbaseline medians (us), per workload:\n" + base.to_string(float_format=fmt.us))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from kernelflow import preflight
    from kernelflow.artifacts.analysis import resolve_runs
    from kernelflow.artifacts.report import report

    out = Path(args.out)
    if not out.parent.is_dir():
        raise preflight.UserError(f"--out {args.out}: no such directory {out.parent}")
    store = preflight.store(args.store, reading=True)
    run_ids = resolve_runs(store, args.runs, args.campaign)
    out.write_text(report(store, run_ids))
    print(f"report of {len(run_ids)} run(s) written to {out.resolve()}")
    return 0


def cmd_flush(args: argparse.Namespace) -> int:
    """Opening an S3 store already tries its spool (the uploads an unreachable S3 left pending): report what is left."""
    from kernelflow import preflight

    store = preflight.store(args.store, reading=True, probe=False)  # an S3 store that does not answer: said below
    left = store.mirror.pending() if store.mirror else []
    print(f"{len(left)} artifact file(s) still wait in {store.root / 'spool'} for {store.location}" if left else
          f"nothing pending: every artifact is in {store.location}")
    return 1 if left else 0


def cmd_export(args: argparse.Namespace) -> int:
    from kernelflow import preflight
    from kernelflow.artifacts import fmt
    from kernelflow.export import ExportError, export

    store = preflight.store(args.store, reading=True)
    try:
        manifest = export(store, args.problem, args.out, run_id=args.run,
                          even_if_slower=args.even_if_slower, force=args.force)
    except ExportError as e:
        print(f"nothing exported: {e}", file=sys.stderr)
        return 1
    won = "" if manifest["beats_baselines"] else " (NOT faster than the baseline: exported on request)"
    print(f"exported {manifest['candidate']['backend']} candidate {manifest['candidate']['id']} of "
          f"{manifest['problem']['id']} from run {manifest['run_id']}, {fmt.speedup(manifest['speedup_vs_eager'])} eager on "
          f"{manifest['device']}{won}, to {Path(args.out).resolve()}; its __init__.py says how to use it")
    return 0


def _policy(pairs: list[str] | None) -> dict | None:
    """--policy allow_vendor_libraries=false ... as Policy fields (booleans: true/false)."""
    from kernelflow.stages.contracts import Policy

    out: dict = {}
    for pair in pairs or []:
        key, _, value = pair.partition("=")
        if key not in Policy.model_fields or value.lower() not in ("true", "false"):
            raise SystemExit(f"--policy {pair!r}: expected one of {', '.join(Policy.model_fields)} = true|false")
        out[key] = value.lower() == "true"
    return out or None


def run_config(args: argparse.Namespace) -> RunConfig:
    """The optimize command's options as a RunConfig; a value it refuses is an error naming the option."""
    from pydantic import ValidationError

    from kernelflow.flows.config import LLMLimits, RunConfig
    from kernelflow.preflight import options_error

    try:
        return RunConfig(
            budget=args.budget, wall_time_s=args.wall_time, gpu_seconds=args.gpu_seconds, target_sol=args.target_sol,
            strategy=args.strategy, proposer=args.proposer, backend=args.backend,
            llm=LLMLimits(model=args.model, max_tokens=args.llm_max_tokens, max_usd=args.llm_max_usd),
            device=args.device, sizes=args.sizes, baselines=args.baselines.split(",") if args.baselines else None,
            executor=args.executor, image=args.image, store=args.store, policy=_policy(args.policy),
            warm_start=args.warm_start, timing_budget_s=args.timing_budget, seeds=args.seeds,
            families=args.families.split(",") if args.families else None)
    except ValidationError as e:
        raise options_error(e) from e


def cmd_optimize(args: argparse.Namespace) -> int:
    from kernelflow import preflight

    _executor(args)
    config = run_config(args)
    path, problem = preflight.problem(args.problem)
    preflight.run(config, problem, resume=args.resume)  # all before Prefect starts
    _prefect_api()
    from kernelflow.flows.optimize import optimize

    _plain_prefect_logs(args)
    from kernelflow.live import showing

    with showing():
        summary = optimize(path, config, resume=args.resume)  # the flow printed the leaderboard and the winner
    from kernelflow.artifacts.fmt import speedup

    print(f"\nbest candidate: {summary['best_candidate_id'] or 'none verified'} "
          f"({speedup(summary['best_speedup_vs_eager'])} vs eager); "
          f"again with `kernelflow show {summary['run_id']} --store {summary['store']}`")
    return 0


def _prefect_api() -> None:
    """Before a command that runs flows imports Prefect: the API it talks to, if none is configured a local server
    that ends with this process (kernelflow/local_server.py), never one that outlives a killed run."""
    from kernelflow.local_server import ensure
    from kernelflow.preflight import prefect_api

    prefect_api()
    ensure(float(os.environ.get("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", EPHEMERAL_STARTUP_S)))


def _plain_prefect_logs(args: argparse.Namespace) -> None:
    """Without --debug, Prefect's console log lines keep their message (a failed flow's names the exception) and lose
    the traceback; its API log handler, which formats records first, keeps them for the UI."""
    if _debug(args):
        return
    for handler in logging.getLogger().handlers:
        if type(handler).__name__ == "PrefectConsoleHandler" and not hasattr(handler.format, "plain"):
            handler.format = _without_traceback(handler.format)  # type: ignore[method-assign,assignment]


def _without_traceback(format_record: Callable[[logging.LogRecord], str]) -> Callable[[logging.LogRecord], str]:
    def format(record: logging.LogRecord) -> str:
        kept = record.exc_info, record.exc_text, record.stack_info
        record.exc_info = record.exc_text = record.stack_info = None
        try:
            return format_record(record)
        finally:
            record.exc_info, record.exc_text, record.stack_info = kept

    format.plain = True  # type: ignore[attr-defined]
    return format


def cmd_campaign(args: argparse.Namespace) -> int:
    from kernelflow import preflight
    from kernelflow.flows.suite import load_suite

    suite = load_suite(args.suite)  # the file, then every entry, before Prefect starts
    remote = (args.dispatch or suite.dispatch.mode) == "deployments"
    preflight.suite(suite, args.store, here=not remote)
    _prefect_api()
    from kernelflow.flows.campaign import campaign

    _plain_prefect_logs(args)
    if remote:
        preflight.dispatch_target(suite.dispatch)
    from kernelflow.live import showing

    with showing():
        summary = campaign(str(Path(args.suite).resolve()), store=args.store, dispatch=args.dispatch)
    for entry, outcome in summary["problems"].items():
        print(f"{entry:28s} {outcome['status']:9s} {outcome['verdict']:12s} {outcome['run_id'] or '-'}")
    print(f"campaign {summary['campaign_id']}; report {summary['report'] or '(no run)'}\n"
          f"`kernelflow report --campaign {summary['campaign_id']} --store {summary['store']}`")
    return 1 if any(o["status"] == "failed" or o["verdict"] in ("slower", "broken")
                    for o in summary["problems"].values()) else 0


def cmd_deploy(args: argparse.Namespace) -> int:
    from kernelflow.preflight import UserError

    if args.prefect_file and not Path(args.prefect_file).is_file():
        raise UserError(f"--prefect-file {args.prefect_file}: no such file")
    from prefect.settings import get_current_settings

    from kernelflow.deploy import deploy
    from kernelflow.local_server import answers

    if not (url := get_current_settings().api.url):
        raise UserError("deploy: no Prefect API is configured: set PREFECT_API_URL to your Prefect server (e.g. "
                        "http://HOST:4200/api; infra/README.md)")
    if not answers(url):
        raise UserError(f"deploy: the Prefect API at {url} (PREFECT_API_URL) does not answer; start the server or "
                        "fix the URL")

    applied = deploy(gpus=args.gpus, host=args.host, image=args.image, workdir=args.workdir, pool_type=args.pool_type,
                     **({"prefect_file": Path(args.prefect_file)} if args.prefect_file else {}))
    for pool, queues in applied["queues"].items():
        print(f"work pool {pool}: queues {', '.join(queues)} (concurrency limit 1 each)")
    print(f"deployments: {', '.join(applied['deployments'])}")
    return 0


def cmd_serve(args: argparse.Namespace) -> int:
    from kernelflow import preflight
    from kernelflow.flows.suite import load_suite

    suite = load_suite(args.suite)  # refuse a broken suite now, not at 2 am
    remote = (args.dispatch or suite.dispatch.mode) == "deployments"
    preflight.suite(suite, args.store, here=not remote)
    _prefect_api()
    if remote:
        preflight.dispatch_target(suite.dispatch)
    from kernelflow.deploy import serve

    when = {"cron": args.cron} if args.cron else {}  # default: the nightly schedule of infra/prefect.yaml
    serve(args.suite, timezone=args.timezone, name=args.name, store=args.store, dispatch=args.dispatch, **when)
    return 0


STORE_HELP = ("artifact store: a directory or s3://bucket/prefix (endpoint and keys as boto3 reads them, e.g. "
              "AWS_ENDPOINT_URL; local copy in $KERNELFLOW_STORE_LOCAL); default $KERNELFLOW_STORE or ./runs")


def executor_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--executor", choices=["subprocess", "inline", "docker"], default="subprocess",
                    help="where stages that run candidate code run: a subprocess, this process (trusted code only), "
                    "or a container per stage call (needs --image)")
    sp.add_argument("--image", help="stage worker image for --executor docker (`make images`: kernelflow-cpu, "
                    "kernelflow-gpu)")


def _executor(args: argparse.Namespace) -> Mode:
    from kernelflow.stages.executors.docker import Docker

    if args.executor != "docker":
        if args.image:
            raise SystemExit("--image goes with --executor docker")
        return args.executor
    if not args.image:
        raise SystemExit("--executor docker needs --image NAME (an image built by `make images`, e.g. kernelflow-cpu)")
    return Docker(image=args.image)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kernelflow", description=__doc__)
    p.add_argument("--debug", action="store_true", help="show the traceback of an error (also KERNELFLOW_DEBUG=1)")
    sub = p.add_subparsers(dest="command", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--store", help=STORE_HELP)
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
    o.add_argument("--timing-budget", type=float, metavar="SECONDS", help="timing per shape in one benchmark call, "
                   "at most (it stops sooner once its interval is tight; default 30 on cuda, 5 on cpu)")
    o.add_argument("--target-sol", type=float, metavar="FRACTION", help="stop once the best candidate reaches this "
                   "share of speed of light (floor / median, geomean over the timed shapes; a GPU with known ceilings)")
    o.add_argument("--resume", metavar="RUN_ID", help="continue an interrupted run from its artifacts (its "
                   "unfinished candidates first; its strategy's saved state)")
    o.add_argument("--warm-start", action="store_true", help="evaluate the last finished run's best candidate of "
                   "this problem (same source) first")
    o.add_argument("--seeds", type=int, metavar="N", help="with --proposer llm: the builtin proposer's candidates "
                   "evaluated first, the best of them the kernel the model's first prompt has to beat (default one per "
                   "matching template family; 0: none)")
    o.add_argument("--families", metavar="A,B", help="the builtin proposer's template families to use, a comma "
                   "list (default all; `kernelflow problems coverage` names them)")
    o.add_argument("--model", help="LLM model name (default $KERNELFLOW_LLM_MODEL)")
    o.add_argument("--llm-max-tokens", type=int, help="stop the run when its LLM calls have used this many tokens")
    o.add_argument("--llm-max-usd", type=float, help="stop the run when its LLM calls cost this much (estimate from "
                   "KERNELFLOW_LLM_PRICE_IN/_OUT, dollars per million tokens)")
    executor_options(o)
    o.add_argument("--policy", action="append", metavar="FIELD=true|false",
                   help="override the problem's policy for this run, e.g. allow_vendor_libraries=false (repeatable)")
    common(o)
    o.set_defaults(fn=cmd_optimize)
    pr = sub.add_parser("problems", help="problem files").add_subparsers(dest="action", required=True)
    v = pr.add_parser("validate", help="check problem files, SOL-ExecBench definition folders, or directories of "
                      "either")
    v.add_argument("paths", nargs="+")
    v.set_defaults(fn=cmd_validate)
    cv = pr.add_parser("coverage", help="which template families of the builtin proposer match each problem, why the "
                       "others do not, and a summary per folder (CPU only; exit 1 when a problem does not load)")
    cv.add_argument("paths", nargs="+")
    cv.add_argument("--all-reasons", action="store_true", help="the refusals of problems that some family matches too")
    cv.add_argument("--width", type=int, default=160, help="clip each reason to this many characters (0: never)")
    cv.set_defaults(fn=cmd_coverage)
    rf = pr.add_parser("roofline", help="counted work, SOL floor and bottleneck class per GPU shape")
    rf.add_argument("paths", nargs="+")
    rf.add_argument("--gpu", default="NVIDIA H200", help="ceilings of this GPU (stages/measure/peaks.py)")
    rf.set_defaults(fn=cmd_roofline)
    for name, timed in (("verify", False), ("bench", True)):
        sp = sub.add_parser(name, help=f"{'verify and time' if timed else 'verify'} your own ModelNew file")
        sp.add_argument("problem")
        sp.add_argument("candidate")
        sp.add_argument("--timeout", type=float, default=600.0, help="per-stage deadline, seconds")
        executor_options(sp)
        common(sp)
        sp.set_defaults(fn=lambda a, t=timed: cmd_verify(a, t))
    s = sub.add_parser("show", help="leaderboard of a run, or what a verify or bench recorded, from the artifacts alone")
    s.add_argument("run", nargs="?", default="latest", help="a run id: an optimize run's, or the one verify or bench "
                   "printed; 'latest' (the default): the optimize run started last")
    s.add_argument("--store", help=STORE_HELP)
    s.set_defaults(fn=cmd_show)
    r = sub.add_parser("report", help="one self-contained HTML report (plots, leaderboards) of runs, from the "
                       "artifacts alone (docs/REPORTS.md)")
    r.add_argument("runs", nargs="*", help="run ids (optimize runs', or those verify and bench printed), or 'latest' "
                   "(the default: the optimize run started last)")
    r.add_argument("--campaign", metavar="all|RUN_ID,RUN_ID", help="several runs: 'all' (every optimize run in the "
                   "store), a campaign id or comma-separated run ids")
    r.add_argument("--out", default="report.html", help="the HTML file to write (default report.html)")
    r.add_argument("--store", help=STORE_HELP)
    r.set_defaults(fn=cmd_report)
    f = sub.add_parser("flush", help="upload what an S3 store's spool holds (written while S3 was unreachable)")
    f.add_argument("--store", help=STORE_HELP)
    f.set_defaults(fn=cmd_flush)
    e = sub.add_parser("export", help="write a problem's best verified kernel as a drop-in package (docs/EXPORT.md)")
    e.add_argument("problem", help="problem id (e.g. 09_silu) or its file")
    e.add_argument("--out", required=True, help="the package folder to write (its name is the package's name)")
    e.add_argument("--store", help=STORE_HELP)
    e.add_argument("--run", metavar="RUN_ID", help="export this run's winner (default: the best over every run)")
    e.add_argument("--even-if-slower", action="store_true", help="when a baseline won, export the best verified "
                   "candidate anyway (the manifest and docstring say it is slower)")
    e.add_argument("--force", action="store_true", help="replace an earlier export at --out")
    e.set_defaults(fn=cmd_export)
    c = sub.add_parser("campaign", help="optimize every problem of a suite file (docs/CAMPAIGNS.md); exit 1 when one "
                       "failed or re-timed slower than last time")
    c.add_argument("suite", help="the suite (YAML), e.g. suites/nightly.yaml")
    c.add_argument("--store", help=STORE_HELP + "; overrides the suite's")
    c.add_argument("--dispatch", choices=["local", "deployments"], help="overrides the suite's: subflows here, or "
                   "flow runs of the optimize deployment on the GPU work queues (kernelflow deploy)")
    c.set_defaults(fn=cmd_campaign)
    d = sub.add_parser("deploy", help="create or update the work pool, one queue per GPU and the deployments of "
                       "infra/prefect.yaml at $PREFECT_API_URL (infra/README.md)")
    d.add_argument("--gpus", type=int, default=1, help="GPU queues to make: gpu-0 .. gpu-(N-1)")
    d.add_argument("--host", help="name the queues HOST-gpu-N (one deploy per GPU host)")
    d.add_argument("--image", help="the flow-run image (default kernelflow-gpu:latest, infra/work-pool.json)")
    d.add_argument("--workdir", help="the checkout's path on the hosts (default infra/prefect.yaml's pull step)")
    d.add_argument("--pool-type", choices=["docker", "process"], default="docker", help="docker: a container per "
                   "flow run with its GPU as a device request (infra/work-pool.json); process: hosts without docker, "
                   "one worker per GPU with CUDA_VISIBLE_DEVICES set (infra/README.md)")
    d.add_argument("--prefect-file", help="deployments file (default infra/prefect.yaml)")
    d.set_defaults(fn=cmd_deploy)
    v = sub.add_parser("serve", help="serve the campaign flow over a suite on a cron schedule, in this process")
    v.add_argument("suite")
    v.add_argument("--cron", help="when, as cron (default 0 2 * * *: 02:00 every day)")
    v.add_argument("--timezone", default="UTC")
    v.add_argument("--name", help="the deployment's name (default the suite's)")
    v.add_argument("--store", help=STORE_HELP + "; overrides the suite's")
    v.add_argument("--dispatch", choices=["local", "deployments"], help="overrides the suite's")
    v.set_defaults(fn=cmd_serve)
    _debug_everywhere(sub)
    return p


def _debug_everywhere(sub: argparse._SubParsersAction) -> None:
    """--debug after the command too (`kernelflow verify P C --debug`); the main parser's default stands."""
    for command in set(sub.choices.values()):
        command.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        for action in command._actions:
            if isinstance(action, argparse._SubParsersAction):
                _debug_everywhere(action)


def _debug(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "debug", False)) or os.environ.get("KERNELFLOW_DEBUG") == "1"


EPHEMERAL_STARTUP_S = 120  # seconds the local Prefect server may take to start (main)


def kernelflow_defaults(environ: Mapping[str, str], cwd: Path) -> dict[str, str]:
    """The environment settings kernelflow runs Prefect with, those of them `environ` does not set already: Prefect's
    home in <cwd>/.kernelflow/prefect (beside the default store ./runs, so a later `prefect server start` with the same
    PREFECT_HOME shows every run), analytics off, the server's (else "database is locked" noise on a fresh database)
    and the client's (DO_NOT_TRACK; else a notice on the first run in a terminal), per-task state
    lines quiet (the flow's own progress lines stay), and a startup deadline for the local server's first start, which
    creates and migrates its database and can outlast Prefect's 20 s default on a small loaded machine."""
    defaults = {
        "PREFECT_HOME": str(cwd / ".kernelflow" / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "DO_NOT_TRACK": "1",  # the client's telemetry, and its first-run notice on a terminal
        "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL": "WARNING",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": str(EPHEMERAL_STARTUP_S),
    }
    return {key: value for key, value in defaults.items() if key not in environ}


def main(argv: list[str] | None = None) -> int:
    """Run a command; an error ends it with preflight.explain's lines and status 1 (130 when interrupted), its
    traceback only with --debug or KERNELFLOW_DEBUG=1. kernelflow's Prefect settings (kernelflow_defaults) are set
    first, before any command imports Prefect, which reads them then."""
    os.environ.update(kernelflow_defaults(os.environ, Path.cwd()))
    args = parser().parse_args(argv)
    if _debug(args):
        return _run(args)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _plain_warnings(warnings.showwarning)
            return _run(args)
    except KeyboardInterrupt:
        print("kernelflow: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        from kernelflow.preflight import explain

        for line in explain(e):
            print(f"kernelflow: error: {line}", file=sys.stderr)
        return 1


def _plain_warnings(show: Callable[..., None]) -> Callable[..., None]:
    """kernelflow's own warnings (an S3 store's uploads left in the spool, a suite's broken entry) as one line; others
    as `show` shows them."""
    def plain(message: Warning | str, category: type[Warning], filename: str, lineno: int, file: TextIO | None = None,
              line: str | None = None) -> None:
        if category.__module__.startswith("kernelflow."):
            print(f"kernelflow: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return plain


def _run(args: argparse.Namespace) -> int:
    if home := os.environ.get("PREFECT_HOME"):  # Prefect creates its home without parents, then fails to start
        Path(home).expanduser().mkdir(parents=True, exist_ok=True)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
