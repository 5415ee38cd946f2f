"""Where a candidate's host time goes, line by line, in KernelBench's per-call sequence (issue 8 part 5).

The forward of ModelNew and the templates' `_kf_launch` (stages/templates/launch.py) are instrumented: a
perf_counter_ns stamp after every statement, and one before the call. Each call runs right after KernelBench's sync,
events and flush (scripts/agreement.py), as the procedure runs it, 100 times; the record is the median host time of
each statement, in source order, and of the call's entry (nn.Module.__call__ to the forward's first line). No launch
hook is set, so the launches take the path they take in KernelBench's procedure.

`python3 scripts/probes/forward_lines.py 06_row_mean [--source FILE]` (default: the best candidate of bench/results,
rebuilt). `--micro`: instead, single statements a forward may use, each timed alone the same way (allocations three
ways, triton's integer helpers against the candidate's own, an empty module's call). Needs CUDA. `--out FILE` writes
the JSON record.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

STAMP = "_kf_probe_stamps.append(({}, _kf_probe_now()))"


class Stamper(ast.NodeTransformer):
    """A stamp after every statement of the functions named in `names` (into if/else and loop bodies too)."""

    def __init__(self, names: set[str]):
        self.names, self.labels = names, []

    def _body(self, body: list[ast.stmt]) -> list[ast.stmt]:
        out: list[ast.stmt] = []
        for stmt in body:
            for field in ("body", "orelse"):
                if isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)) and getattr(stmt, field, None):
                    setattr(stmt, field, self._body(getattr(stmt, field)))
            out.append(stmt)
            if not isinstance(stmt, (ast.Return, ast.If, ast.For, ast.While, ast.With, ast.Try)):
                out.append(self._stamp(ast.unparse(stmt).splitlines()[0][:90]))
        return out

    def _stamp(self, label: str) -> ast.stmt:
        self.labels.append(label)
        return ast.parse(STAMP.format(len(self.labels) - 1)).body[0]

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        if node.name in self.names:
            node.body = [self._stamp(f"{node.name}: entry"), *self._body(node.body)]
        return node


def micro(trials: int) -> dict[str, float]:
    """Median host time of single statements, each right after KernelBench's sync, events and flush (module doc)."""
    import torch
    import triton
    from launch_path import kb_flush

    from stages.templates import launch

    helper = {"torch": torch, "triton": triton}
    exec(launch.SOURCE, helper)
    x = torch.randn(8192, 1024, device="cuda")
    module = torch.nn.Identity()
    statements = {
        "torch.empty(x.shape, device=x.device, dtype=torch.float32)":
            lambda: torch.empty(x.shape, device=x.device, dtype=torch.float32),
        "x.new_empty(x.shape, dtype=torch.float32)": lambda: x.new_empty(x.shape, dtype=torch.float32),
        "torch.empty_like(x)": lambda: torch.empty_like(x),
        "x.new_empty(x.shape[:-1], dtype=torch.float32)": lambda: x.new_empty(x.shape[:-1], dtype=torch.float32),
        "triton.next_power_of_2(65536)": lambda: triton.next_power_of_2(65536),
        "_kf_pow2(65536)": lambda: helper["_kf_pow2"](65536),
        "triton.cdiv(65536, 1024)": lambda: triton.cdiv(65536, 1024),
        "_kf_cdiv(65536, 1024)": lambda: helper["_kf_cdiv"](65536, 1024),
        "torch.nn.Identity()(x)": lambda: module(x),
        "nothing": lambda: None,
    }
    out = {}
    for label, fn in statements.items():
        samples = []
        for _ in range(trials):
            torch.cuda.synchronize()
            kb_flush()
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) / 1e3)
        out[label] = statistics.median(samples)
        print(f"{out[label]:7.1f} us  {label}", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem", nargs="?")
    ap.add_argument("--micro", action="store_true", help="single statements instead of a candidate (module doc)")
    ap.add_argument("--source", type=Path, help="a candidate source instead of the rebuilt best")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("forward_lines.py times CUDA launches: no CUDA device here")
    from bench_gpu import rebuild
    from launch_path import kb_flush

    from stages.inputs import draw, trial_seed
    from stages.instantiate import build, set_precision
    from stages.problem import import_file, import_problem, load_problem

    if args.micro:
        record = {"micro_us": micro(args.trials)}
        if args.out:
            args.out.write_text(json.dumps(record, indent=1))
        return
    problem = load_problem(ROOT / "problems" / f"{args.problem}.py")
    source = args.source.read_text() if args.source else \
        rebuild(problem, json.loads((ROOT / "bench" / "results" / f"{args.problem}.json").read_text())).source
    stamper = Stamper({"forward", "_kf_launch"})
    tree = ast.fix_missing_locations(stamper.visit(ast.parse(source)))
    path = Path(tempfile.mkdtemp()) / "kf_probe_lines.py"
    path.write_text("from time import perf_counter_ns as _kf_probe_now\n_kf_probe_stamps = []\n" + ast.unparse(tree))
    cand = import_file(path, path.stem)
    set_precision(problem.policy)
    module = import_problem(problem.path)
    record = {"problem": args.problem, "source": str(args.source or "rebuilt best"), "workloads": {}}
    for w in problem.workloads("gpu"):
        _, new = build(module, cand.ModelNew, w, "cuda", seed=trial_seed(0, w.name, "init"))
        inputs = draw(module, w, trial_seed(0, w.name, "bench", 0), "declared", "cuda")
        for _ in range(3):
            new(*inputs)
        torch.cuda.synchronize()
        runs: list[list[int]] = []
        for _ in range(args.trials):
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            kb_flush()
            start.record()
            cand._kf_probe_stamps.clear()
            t0 = time.perf_counter_ns()
            new(*inputs)
            t1 = time.perf_counter_ns()
            end.record()
            torch.cuda.synchronize()
            runs.append([(-1, t0), *cand._kf_probe_stamps, (-2, t1)])
        # the time from the previous stamp to each stamp, by the statement it follows; every run on a shape takes the
        # same path (a run that did not is left out)
        path = [i for i, _ in runs[0]]
        same = [r for r in runs if [i for i, _ in r] == path]
        steps = [(stamper.labels[i] if i >= 0 else "return to the caller",
                  statistics.median((r[k][1] - r[k - 1][1]) / 1e3 for r in same)) for k, i in enumerate(path) if k]
        total = statistics.median((r[-1][1] - r[0][1]) / 1e3 for r in same)
        record["workloads"][w.name] = {"host_call_us": total, "runs": len(same), "steps_us": steps}
        print(f"{args.problem} {w.name}: host call {total:.1f} us (median of {len(same)}); to each stamp:", flush=True)
        for label, us in steps:
            print(f"  {us:7.1f}  {label}", flush=True)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
