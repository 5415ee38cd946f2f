"""How long the host takes to issue a Triton kernel right after a device sync, by launch path (issue 8, part 5).

KernelBench's procedure (scripts/agreement.py) records its start event behind a 256 MiB L2 flush and times up to
an event after the call. If the host takes longer to reach the call's first launch than the flush keeps the device
busy, the device idles inside the timed span and the gap is timed. The seventh session's records showed that gap on
Triton candidates of 480-740 us (an exported ModelNew), while eager agreed. This script measures where the host's
time goes, on one pointwise kernel (y = 2x + 1, fp32, `--numel` elements), for these launch paths:

- `torch`: `torch.add(x, x, out=y)`, one ATen call: the control, what eager's first launch costs;
- `jit`: the @triton.jit function launched as templates do, `kernel[grid](x, y, n, BLOCK=...)`, output given;
- `module`: what a template's ModelNew does: nn.Module call, `.contiguous()`, `torch.empty`, then the `jit` launch;
- `compiled`: the CompiledKernel the JIT returned, launched through its own runner (`compiled[grid](...)`): no
  argument binding, no specialization, no cache lookup;
- `raw`: that kernel's launcher called directly with a stream fetched once (the floor of a Python launch);
- `lean`: the templates' launch (stages/templates/launch.py `_kf_launch`): the JIT once per key, then the launcher.

Per path: the host time of one call with the device busy (`warm_host_us`, as agreement.py's host_launch_us), the
host time of one call right after KernelBench's sync and flush (`cold_host_us`), KernelBench's procedure (`kb_us`),
and the same procedure with a device spin after the flush that hides the host path (`covered_us`). `kb_us -
covered_us` is the host path the procedure timed. Medians and 10/90th percentiles of 100 calls.

`--problems 14,21`: instead, the best candidates of bench/results (rebuilt from their family and parameters, as
scripts/agreement.py does), each on its GPU shapes, in KernelBench's per-call sequence with three events more: one
before the flush, and one recorded from Triton's launch-enter hook just before the call's first kernel launch. The
device reaches the hook's event when both the flush is done and the host has issued it, so `flush_us` (before-flush
event to start event) is how long the flush kept the device busy (or longer, when the host recorded the start event
after the flush was done), and `idle_us` (start event to the hook's event) is how long the device then waited for
the host to reach the first launch: the part of KernelBench's time that is not the kernels'. `kernel_us` is the
hook's event to the end event, `host_call_us` the host's time for the whole call. The hook itself adds a few
microseconds of host time. `--after` runs the probe after the harness's hooks or stages (first_launch's doc).
`--before DIR`: the candidate source DIR/<problem>.py (an earlier template's rendering) is timed too, and eager
PyTorch, in the same process, contender by contender on each shape, so both sources meet the same host state.

Needs CUDA (refuses otherwise). `--out FILE` writes the JSON record.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

BLOCK = 1024
TRIALS = 100


def quantiles(xs: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(xs, n=10)
    return {"median": statistics.median(xs), "p10": qs[0], "p90": qs[-1]}


def kb_flush(flush_bytes: int | None = None) -> None:
    """KernelBench's L2 flush before each timed call (scripts/agreement.py): a 256 MiB int64 tensor filled, freed."""
    import torch
    from agreement import KB_FLUSH_BYTES

    scratch = torch.empty((flush_bytes or KB_FLUSH_BYTES) // 8, dtype=torch.int64, device="cuda")
    scratch.fill_(42)
    del scratch


def cold_host_us(fn: Callable[[], Any], flush_bytes: int, trials: int = TRIALS) -> list[float]:
    """Host time of one call issued right after KernelBench's per-call sequence: synchronize, events, flush."""
    import torch

    samples = []
    for _ in range(trials):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        kb_flush(flush_bytes)
        start.record()
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
        end.record()
    torch.cuda.synchronize()
    return samples


def paths(numel: int) -> dict[str, Callable[[], Any]]:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def affine(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0 + 1.0, mask=mask)

    x = torch.randn(numel, device="cuda")
    y = torch.empty_like(x)
    grid = (triton.cdiv(numel, BLOCK), 1, 1)
    compiled = affine[grid](x, y, numel, BLOCK=BLOCK)
    runner = compiled[grid]
    stream = torch.cuda.current_stream().cuda_stream

    class Module(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            p0 = x.contiguous()
            out = torch.empty(p0.shape, device=p0.device, dtype=torch.float32)
            n = p0.numel()
            affine[(triton.cdiv(n, BLOCK),)](p0, out, n, BLOCK=BLOCK)
            return out

    module = Module()

    def raw() -> None:
        compiled.run(*grid, stream, compiled.function, compiled.packed_metadata, None, None, None,
                     x, y, numel, BLOCK)

    from kernelflow.stages.templates import launch

    helper = {"torch": torch, "triton": triton}
    exec(launch.SOURCE, helper)
    lean = helper["_kf_launch"]

    return {
        "torch": lambda: torch.add(x, x, out=y),
        "jit": lambda: affine[grid](x, y, numel, BLOCK=BLOCK),
        "module": lambda: module(x),
        "compiled": lambda: runner(x, y, numel, BLOCK),
        "raw": raw,
        "lean": lambda: lean(affine, grid, x, y, numel, BLOCK=BLOCK),
    }


def cpu_reference_us(reps: int = 50) -> dict[str, float]:
    """A fixed host-only workload, no device involved (a Python loop of dict updates, then 20 empty CPU
    tensors through torch's dispatcher): if a process whose first launches are slow runs this slower too, the host
    itself is slow (the VM's share of the CPU), not the candidate's launch path."""
    import torch

    def work() -> None:
        table: dict[int, int] = {}
        for i in range(300):
            table[i & 63] = table.get(i & 63, 0) + i
        for _ in range(20):
            torch.empty(0)

    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        work()
        samples.append((time.perf_counter() - t0) * 1e6)
    return quantiles(samples)


def kb_sequence(fn: Callable[[], Any], marks: list[Any], trials: int = TRIALS) -> dict[str, Any]:
    """KernelBench's per-call sequence on `fn` with the events of the module doc; `marks` receives the launch-enter
    hook's event (no event: `idle_us` and `kernel_us` are not measured, as for eager, which launches no Triton
    kernel)."""
    import torch

    samples: dict[str, list[float]] = {"kb_us": [], "flush_us": [], "idle_us": [], "kernel_us": [],
                                       "host_call_us": [], "flush_host_us": []}
    for _ in range(trials):
        torch.cuda.synchronize()
        pre, start, end = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        t_pre = time.perf_counter()
        pre.record()
        kb_flush()
        marks.clear()
        start.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        end.record()
        torch.cuda.synchronize()
        samples["kb_us"].append(start.elapsed_time(end) * 1e3)
        samples["flush_us"].append(pre.elapsed_time(start) * 1e3)
        if marks:
            samples["idle_us"].append(start.elapsed_time(marks[0]) * 1e3)
            samples["kernel_us"].append(marks[0].elapsed_time(end) * 1e3)
        samples["host_call_us"].append((t1 - t0) * 1e6)
        samples["flush_host_us"].append((t0 - t_pre) * 1e6)
    return {k: quantiles(v) for k, v in samples.items() if v}


def first_launch(problem_id: str, after: str = "nothing", trials: int = TRIALS,
                 before: Path | None = None) -> dict[str, Any]:
    """KernelBench's per-call sequence on one problem's rebuilt best candidate, with the device's wait for the
    host's first launch measured by an event from Triton's launch-enter hook (module doc). `after`: what this
    process did first: "nothing"; "hooks", the harness's process-wide hooks (the audit hook, the launch census),
    "audit" or "census" one of them; "count", a bare audit hook counting the audited events of the timed loop;
    "stages", kernelflow's verify and benchmark stages run in this process on the candidate, as
    scripts/agreement.py does before it times the export. `before`: a folder whose <problem>.py is timed too, and
    eager (module doc)."""
    import tempfile

    import torch
    from bench_gpu import rebuild
    from triton import knobs

    from kernelflow.stages.harness.instantiate import build, set_precision
    from kernelflow.stages.problems.inputs import draw, trial_seed
    from kernelflow.stages.problems.kernelbench import import_file, import_problem, load_problem

    problem = load_problem(ROOT / "problems" / f"{problem_id}.py")
    cand = rebuild(problem, json.loads((ROOT / "bench" / "results" / f"{problem_id}.json").read_text()))
    if cand is None:
        raise ValueError(f"{problem_id}: bench/results has no best candidate to rebuild")
    path = Path(tempfile.mkdtemp()) / f"kf_launch_{cand.id}.py"
    path.write_text(cand.source)
    events: collections.Counter[str] = collections.Counter()
    counting = False
    if after in ("hooks", "audit"):
        from kernelflow.stages.harness import audit

        audit.install_hook()
    if after in ("hooks", "census"):
        from kernelflow.stages.harness import launches

        launches.install_counters(triton=True)
    if after == "count":
        sys.addaudithook(lambda event, _: events.update((event,)) if counting else None)
    elif after == "stages":
        from kernelflow.stages import benchmark, verify
        from kernelflow.stages.contracts import BenchmarkRequest, VerifyRequest

        common = dict(problem=problem, candidate=cand, device="cuda", blob_dir=str(path.parent / "blobs"))
        checked = verify.run(VerifyRequest(**common, sizes=["gpu"], trials=2,  # type: ignore[arg-type]
                                           workdir=str(path.parent / "verify")))
        timed = benchmark.run(BenchmarkRequest(**common, sizes="gpu", baselines=["eager"],  # type: ignore[arg-type]
                                               workdir=str(path.parent / "benchmark")))
        print(f"{problem_id}: verify {checked.status}, benchmark {timed.status}", flush=True)
    set_precision(problem.policy)
    module = import_problem(problem.path)
    classes = {"candidate": import_file(path, path.stem).ModelNew}
    if before is not None:
        classes["before"] = import_file(before / f"{problem_id}.py", f"kf_launch_before_{cand.id}").ModelNew
    marks: list[torch.cuda.Event] = []

    def hook(_: Any) -> None:
        if not marks:
            marks.append(torch.cuda.Event(enable_timing=True))
            marks[0].record()

    record: dict[str, Any] = {"after": after, "candidate_id": cand.id, "origin": cand.origin.model_dump(),
                              "before": str(before) if before else None, "workloads": {}}
    for w in problem.workloads("gpu"):
        models = {}
        for label, cls in classes.items():
            ref, models[label] = build(module, cls, w, "cuda", seed=trial_seed(0, w.name, "init"))
        if before is not None:
            models["eager"] = ref
        inputs = draw(module, w, trial_seed(0, w.name, "bench", 0), "declared", "cuda")
        cells = record["workloads"][w.name] = {}
        for label, model in models.items():
            for _ in range(3):
                model(*inputs)
            torch.cuda.synchronize()
            knobs.runtime.launch_enter_hook = hook
            counting = True
            try:
                cell = kb_sequence(lambda model=model, inputs=inputs: model(*inputs), marks, trials)
            finally:
                knobs.runtime.launch_enter_hook = None
                counting = False
            cell["cpu_reference_us"] = cpu_reference_us()
            cells[label] = cell
            if after == "count":
                cell["audit_events_per_call"] = {k: v / trials for k, v in events.most_common()}
                print(f"{problem_id} {w.name}: audit events per call {cell['audit_events_per_call']}", flush=True)
                events.clear()
            idle = f"device idle {cell['idle_us']['median']:.1f} + kernels {cell['kernel_us']['median']:.1f}; " \
                if "idle_us" in cell else ""
            print(f"{problem_id} {w.name} {label} (after {after}): KernelBench {cell['kb_us']['median']:.1f} us = "
                  f"{idle}flush {cell['flush_us']['median']:.1f} us; host call {cell['host_call_us']['median']:.1f} us "
                  f"(p90 {cell['host_call_us']['p90']:.1f}); CPU reference {cell['cpu_reference_us']['median']:.1f} us",
                  flush=True)
    return record


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--numel", type=int, default=1 << 27, help="elements of the fp32 input (default 128 Mi: ~1 GiB "
                    "of traffic, ~300 us on an H200)")
    ap.add_argument("--problems", help="comma list of problem ids (e.g. 14_residual_layernorm): the device's wait "
                    "for the first launch of their best candidates instead")
    ap.add_argument("--after", choices=("nothing", "hooks", "audit", "census", "count", "stages"), default="nothing",
                    help="with --problems: what the process does first (first_launch's doc)")
    ap.add_argument("--before", type=Path, help="with --problems: a folder of earlier candidate sources "
                    "(<problem>.py), timed beside the rebuilt ones and eager in each process")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        sys.exit("launch_path.py measures CUDA launches: no CUDA device here")
    from agreement import COVER_DIAG_US, KB_FLUSH_BYTES, host_launch_us, kernelbench_times_ms

    record: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                              "numel": args.numel, "trials": TRIALS, "paths": {}}
    import triton

    record["triton"] = triton.__version__
    if args.problems:
        record["problems"] = {}
        for problem_id in args.problems.split(","):
            try:
                record["problems"][problem_id] = first_launch(problem_id, args.after, before=args.before)
            except Exception as e:  # one problem's failure is recorded, the others still run
                record["problems"][problem_id] = {"error": f"{type(e).__name__}: {e}"}
                print(f"{problem_id}: {type(e).__name__}: {e}", flush=True)
        record["paths"] = {}
    for name, fn in ({} if args.problems else paths(args.numel)).items():
        for _ in range(5):
            fn()
        torch.cuda.synchronize()
        kb = kernelbench_times_ms(fn, [], "cuda", trials=TRIALS)
        covered = kernelbench_times_ms(fn, [], "cuda", trials=TRIALS, cover_us=COVER_DIAG_US)
        cell = {"warm_host_us": host_launch_us(fn, [], "cuda"),
                "cold_host_us": quantiles(cold_host_us(fn, KB_FLUSH_BYTES)),
                "kb_us": quantiles([t * 1e3 for t in kb]),
                "covered_us": quantiles([t * 1e3 for t in covered])}
        cell["timed_host_us"] = cell["kb_us"]["median"] - cell["covered_us"]["median"]
        record["paths"][name] = cell
        print(f"{name:9s} warm host {cell['warm_host_us']:7.1f} us, cold host {cell['cold_host_us']['median']:7.1f} "
              f"(p90 {cell['cold_host_us']['p90']:.1f}), KernelBench {cell['kb_us']['median']:7.1f}, covered "
              f"{cell['covered_us']['median']:7.1f}: timed host path {cell['timed_host_us']:6.1f} us", flush=True)
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
