"""A best kernel of bench/results/ timed in tight loops: our Timer plain, with the launch census, inside a guard
section; KernelBench's loop (256 MiB flush); no flush; the host's time per call (H200, 2026-11-30: docs/LOG.md).
From the repo root, on a GPU host: `python scripts/probes/launch_overhead.py 09_silu 05_gelu_tanh`."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from bench_gpu import rebuild  # noqa: E402

from stages import launches  # noqa: E402
from stages.candidate import load_model_class  # noqa: E402
from stages.inputs import draw  # noqa: E402
from stages.instantiate import build  # noqa: E402
from stages.integrity import Guard  # noqa: E402
from stages.problem import import_problem, load_problem  # noqa: E402
from stages.timing import Timer  # noqa: E402

Call = Callable[..., Any]


def events_us(fn: Call, args: list[Any], flush: torch.Tensor | None, n: int = 200) -> float:
    """KernelBench's loop: sync, flush (or not), events around the call, sync."""
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        if flush is not None:
            flush.fill_(1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        torch.cuda.synchronize()
        out.append(start.elapsed_time(end) * 1e3)
    return statistics.median(out)


def host_us(fn: Call, args: list[Any], n: int = 200) -> float:
    """Host time from the call to its return (launches queued, not finished)."""
    out = []
    for _ in range(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn(*args)
        out.append((time.perf_counter() - t) * 1e6)
    torch.cuda.synchronize()
    return statistics.median(out)


def probe(pid: str) -> dict[str, Any]:
    problem = load_problem(ROOT / "problems" / f"{pid}.py")
    cand = rebuild(problem, json.loads((ROOT / "bench" / "results" / f"{pid}.json").read_text()))
    module = import_problem(problem.path)
    work = Path(f"/tmp/kf-probe/{pid}")
    work.mkdir(parents=True, exist_ok=True)
    w = problem.workloads("gpu")[0]
    ref, new = build(module, load_model_class(cand, work, "cuda"), w, "cuda", seed=0)
    args = draw(module, w, 1, "declared", "cuda")
    timer, flush = Timer("cuda"), torch.empty(256 << 17, dtype=torch.int64, device="cuda")

    def ours(fn: Call) -> float:
        return statistics.median(timer.time_us(fn, args)[0] for _ in range(200))

    row: dict[str, Any] = {}
    with torch.no_grad():
        for _ in range(5):
            new(*args)
        row["plain"] = dict(timer=ours(new), kernelbench=events_us(new, args, flush),
                            no_flush=events_us(new, args, None), host=host_us(new, args))
        row["eager"] = dict(timer=ours(ref), kernelbench=events_us(ref, args, flush), host=host_us(ref, args))
        launches.install(triton=True)
        row["census"] = dict(timer=ours(new), host=host_us(new, args))
        with Guard(work, cand.source).section("probe", timed=True):
            row["guard_section"] = dict(timer=ours(new), kernelbench=events_us(new, args, flush),
                                        host=host_us(new, args))
    return row


if __name__ == "__main__":
    for pid in sys.argv[1:]:
        print(pid, json.dumps(probe(pid), default=lambda x: round(x, 1)), flush=True)
