"""Capture real profiles and tool findings on the H200: one defect fixture per micro-profiling tool
(tests/fixtures/defects/<defect>.py against <defect>_problem.py) and the builtin proposer's first candidate for
three suite problems. Per entry: compile (binaries for the tools), verify (cpu and gpu sizes), profile (time,
energy, ncu counters), then refine; writes <name>.compile.json, .verify.json, .profile.json and .feedback.json
under the output dir, and prints a summary table last (also summary.json). <name>.fixture.json is the small file
the CPU tests read (tests/fixtures/ncu/h200/, tests/stages/measure/test_h200_fixtures.py; format in stages/measure/captured.py).

Run from the repo root on the GPU machine (PYTHONPATH set so `stages` imports):
    python scripts/capture_ncu_fixtures.py --out "$OUT" --max-minutes 8
Resumable: an entry whose .profile.json and .feedback.json exist is skipped (its row is read back). No new entry
starts once --max-minutes have passed. `--device cpu` is a dry run (cpu sizes, counters unavailable).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kernelflow.artifacts.store import Store  # noqa: E402
from kernelflow.flows.recorder import Recorder  # noqa: E402
from kernelflow.flows.steps import Steps  # noqa: E402
from kernelflow.stages import refine  # noqa: E402
from kernelflow.stages.contracts import (  # noqa: E402
    Candidate,
    GenerateRequest,
    Origin,
    Problem,
)
from kernelflow.stages.harness.candidate import backend_of  # noqa: E402
from kernelflow.stages.measure import captured, tools  # noqa: E402
from kernelflow.stages.measure.tools import TOOLS  # noqa: E402
from kernelflow.stages.problems import defaults  # noqa: E402
from kernelflow.stages.problems.kernelbench import load_problem  # noqa: E402
from kernelflow.stages.proposers import builtin  # noqa: E402

DEFECTS = ROOT / "tests" / "fixtures" / "defects"
# cheapest ncu first; launch_bound (100 launches under ncu) last among the defects
DEFECT_NAMES = ["uncoalesced_access", "spills", "low_occupancy", "bank_conflicts", "warp_divergence", "tail_wave",
                "dram_excess", "tensor_cores_unused", "costly_instructions", "long_scoreboard", "fma_low_ilp",
                "launch_bound", "tensor_pipe_underfed"]
# A defect that is a suite problem's own benchmarked candidate runs against that problem, not a copy of it.
SUITE_PROBLEM = {"tensor_pipe_underfed": ROOT / "problems" / "10_matmul_bf16.py"}
BUILTIN_PROBLEMS = ["01_softmax", "05_gelu_tanh", "15_add_rmsnorm"]


def entries() -> list[tuple[str, Path, Path | None, str | None]]:
    """(name, problem file, candidate file or None for the builtin proposer's first, expected tool)."""
    rows = [(d, SUITE_PROBLEM.get(d, DEFECTS / f"{d}_problem.py"), DEFECTS / f"{d}.py", d) for d in DEFECT_NAMES]
    return rows + [(f"builtin_{p}", ROOT / "problems" / f"{p}.py", None, None) for p in BUILTIN_PROBLEMS]


def candidate_for(problem: Problem, path: Path | None) -> Candidate:
    if path is None:
        return builtin.propose(GenerateRequest(problem=problem, n=1)).candidates[0]
    source = path.read_text()
    return Candidate.make(problem.id, backend_of(source), source, Origin(kind="user", proposer="defect-fixture"))


def prebuild(cuda_files: list[Path], env: dict[str, str]) -> None:
    """Build every CUDA extension at once (load_inline caches it in TORCH_EXTENSIONS_DIR for the stages)."""
    code = "import importlib.util as u, sys; s = u.spec_from_file_location('m', sys.argv[1]); " \
           "s.loader.exec_module(u.module_from_spec(s))"
    procs = [(f, subprocess.Popen([sys.executable, "-c", code, str(f)], env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT)) for f in cuda_files]
    for f, p in procs:
        out = p.communicate()[0].decode(errors="replace")
        print(f"prebuild {f.name}: {'ok' if p.returncode == 0 else 'FAILED ' + out[-800:]}", flush=True)


def capture(name: str, problem_path: Path, cand_path: Path | None, out: Path, work: Path, device: str,
            expected: str | None) -> None:
    problem = load_problem(problem_path)
    cand = candidate_for(problem, cand_path)
    steps = Steps(Recorder(Store(work), f"fixture-{name}"), timeout_s=300.0)
    compiled = steps.compile(problem, cand)
    (out / f"{name}.compile.json").write_text(compiled.model_dump_json(indent=1))
    sizes = defaults.verified_sizes(problem, device, defaults.timed_sizes(problem, device))
    verified = steps.verify(problem, cand, device, sizes, trials=2)
    (out / f"{name}.verify.json").write_text(verified.model_dump_json(indent=1))
    prof = steps.profile(problem, cand, device, energy_calls=20)
    (out / f"{name}.profile.json").write_text(prof.model_dump_json(indent=1))
    gpu = _gpu_name() if prof.device == "cuda" else None
    ev = tools.evidence(problem, compiled if compiled.status == "ok" else None, prof, gpu)
    feedback = refine.run(refine.RefineRequest(evidence=ev))
    every = sorted({f.tool for t in TOOLS.values() for f in t.check(ev) if f.severity >= refine.MIN_SEVERITY})
    (out / f"{name}.feedback.json").write_text(feedback.model_dump_json(indent=1))
    captured.dump(out / f"{name}.fixture.json", problem_path, gpu, prof, cand,
                  compiled.kernels if compiled.status == "ok" else [], expected)
    (out / f"{name}.extra.json").write_text(json.dumps({
        "verified": verified.status == "ok", "verify_message": verified.message[:2000],
        "compile_status": compiled.status, "fired_all_tools": every}, indent=1))


def _gpu_name() -> str | None:
    import torch
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def row(name: str, expected: str | None, out: Path) -> dict:
    prof = json.loads((out / f"{name}.profile.json").read_text())
    fb = json.loads((out / f"{name}.feedback.json").read_text())
    extra = json.loads((out / f"{name}.extra.json").read_text()) if (out / f"{name}.extra.json").exists() else {}
    fired = [f["tool"] for f in fb["findings"]]
    return {"name": name, "verified": extra.get("verified"), "counters": prof["counters"],
            "time_us": prof["time_us"], "energy_j_per_call": prof["energy_j_per_call"], "bound": fb["bound"],
            "fired": fired, "fired_all_tools": extra.get("fired_all_tools"),
            "expected": expected, "expected_fired": None if expected is None else expected in fired,
            "profile_status": prof["status"], "counters_reason": prof["counters_reason"][:200]}


def fmt(v: object) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return ",".join(v) or "-"
    return {True: "yes", False: "no", None: "-"}.get(v, str(v)) if isinstance(v, bool) or v is None else str(v)


def fixture_table(fixtures: Path) -> str:
    """BENCHMARKS.md's defect table, re-derived offline from committed fixtures with the current tools."""
    lines = ["| entry | expected tool | time us | energy mJ/call | class | SOL fraction | findings: tool severity "
             "(<cause) |", "|---|---|---|---|---|---|---|"]
    for f in sorted(fixtures.glob("*.json")):
        record, ev = captured.load_capture(f)
        fb, p = refine.run(refine.RefineRequest(evidence=ev)), ev.profile
        assert p is not None and p.time_us is not None
        found = ", ".join(f"{x.tool} {x.severity:.2f}" + (f" (<{x.explained_by})" if x.explained_by else "")
                          for x in fb.findings) or "none"
        energy = f"{p.energy_j_per_call * 1e3:.1f}" if p.energy_j_per_call is not None else "-"
        sol = f"{p.sol_fraction:.2f}" if p.sol_fraction is not None else "-"
        lines.append(f"| {f.stem} | {record['expected_tool'] or '-'} | {p.time_us:.1f} | {energy} | {fb.bound} | "
                     f"{sol} | {found} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT") or "ncu-capture", help="output dir (default $OUT)")
    ap.add_argument("--work", default="/tmp/kf-capture", help="scratch dir: workdirs, blobs, torch extensions")
    ap.add_argument("--max-minutes", type=float, default=8.0, help="start no new entry after this long")
    ap.add_argument("--only", default="", help="comma-separated substrings; run only entries matching one")
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda", help="cpu: a dry run without counters")
    ap.add_argument("--no-prebuild", action="store_true", help="do not build the CUDA extensions up front")
    ap.add_argument("--table", metavar="DIR", help="print the table of the fixtures in DIR (offline) and exit")
    args = ap.parse_args()
    if args.table:
        print(fixture_table(Path(args.table)))
        return 0
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(work / "torch_extensions"))
    started = time.perf_counter()
    todo = [e for e in entries() if not args.only or any(s and s in e[0] for s in args.only.split(","))]
    pending = [e for e in todo if not ((out / f"{e[0]}.profile.json").exists()
                                       and (out / f"{e[0]}.feedback.json").exists())]
    cuda_files = [e[2] for e in pending if e[2] is not None and backend_of(e[2].read_text()) == "cuda"]
    if args.device == "cuda" and cuda_files and not args.no_prebuild:
        prebuild(cuda_files, dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))))
    for name, problem_path, cand_path, expected in pending:
        elapsed = (time.perf_counter() - started) / 60
        if elapsed > args.max_minutes:
            print(f"budget: {elapsed:.1f} min spent, skipping {name}", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            capture(name, problem_path, cand_path, out, work, args.device, expected)
            print(f"{name}: done in {time.perf_counter() - t0:.0f} s", flush=True)
        except Exception as e:  # one entry's failure must not lose the others
            print(f"{name}: FAILED {type(e).__name__}: {e}"[:3000], flush=True)
    rows = [row(n, exp, out) for n, _, _, exp in todo
            if (out / f"{n}.profile.json").exists() and (out / f"{n}.feedback.json").exists()]
    (out / "summary.json").write_text(json.dumps(rows, indent=1))
    cols = ["name", "verified", "counters", "time_us", "energy_j_per_call", "bound", "fired", "expected_fired",
            "fired_all_tools"]
    table = [cols] + [[fmt(r[c]) for c in cols] for r in rows]
    widths = [max(len(t[i]) for t in table) for i in range(len(cols))]
    print(f"\nsummary ({(time.perf_counter() - started) / 60:.1f} min; fired_all_tools: every tool run, "
          "whatever the class selects)")
    for t in table:
        print("  ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
