"""`kernelflow export`: a problem's best verified kernel as a drop-in Python package (docs/EXPORT.md).

Which kernel: the store's winner (artifacts/winner.py) of every run that timed the problem, or of the one run
asked for; a candidate that beat every baseline, GPU runs before CPU runs, then the highest geomean speedup over
eager. When a baseline won every run there is nothing worth exporting: ExportError says so and exports nothing,
unless `even_if_slower` asks for the best verified candidate anyway, which the manifest and the package's
docstring then mark as slower than the baseline.

What: DIR/ is a package named after DIR: model_new.py (the candidate's source, byte for byte as verified),
reference.py (the problem's source it was verified against), op.py (kernelflow/export_op.py: ModelNew behind a
torch custom op with a fake implementation), replay.py for a template's kernel (kernelflow/export_replay.py: its
forward recorded once per input signature and replayed), binaries/ (the compile stage's PTX, cubins, SASS and CUDA
sources), logs/ (compile and verify logs), manifest.json (provenance) and __init__.py (how to use it). The package is
written beside DIR and renamed into place: a failed export leaves nothing half-written.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import shutil
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jinja2
import pandas as pd
import torch
from pydantic import BaseModel

from kernelflow.artifacts import fmt
from kernelflow.artifacts.problem_runs import runs_of
from kernelflow.artifacts.store import Store
from kernelflow.artifacts.tables import model_of
from kernelflow.artifacts.timed import latest_full_timing
from kernelflow.artifacts.winner import BASELINE_NAMES, Winner, winner
from kernelflow.stages.contracts import BenchmarkResult, Candidate, CompileResult, Problem, VerifyResult
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.problems.kernelbench import import_file, load_problem, workload_call

OP_SOURCE = Path(__file__).with_name("export_op.py")
REPLAY_SOURCE = Path(__file__).with_name("export_replay.py")
INIT_TEMPLATE = Path(__file__).with_name("export_init.py.j2")
FORMAT = "kernelflow-export/1"


class ExportError(KernelflowError):
    """Nothing (honest) to export; the message says why and what to do instead."""


class Choice(BaseModel):
    """The kernel to export: a candidate of one run, and that run's verdict under the seeds rule."""

    run_id: str
    device: str  # where the run timed it
    candidate_id: str
    speedup_vs_eager: float  # the candidate's own geomean over the timed workloads
    verdict: Winner

    @property
    def beats_baselines(self) -> bool:
        return not self.verdict.is_baseline


def _last(frame: pd.DataFrame, **match: Any) -> dict[str, Any] | None:
    for column, value in match.items():
        frame = frame[frame[column] == value] if column in frame else frame.iloc[0:0]
    return frame.iloc[-1].to_dict() if not frame.empty else None


def _timed(store: Store, problem_id: str, run_id: str | None = None) -> list[str]:
    """The runs whose benchmarks or baselines timed the problem: run `run_id` alone if named, else of the problem's
    runs (artifacts/problem_runs.py), each run's own partitions read."""
    frames = [f for run in ([run_id] if run_id is not None else runs_of(store, problem_id))
              for f in (store.read("benchmarks", run), store.read("baselines", run)) if not f.empty]
    return sorted({str(r) for f in frames for r in f.run_id[f.problem_id == problem_id]})


def choose(store: Store, problem_id: str, run_id: str | None = None, even_if_slower: bool = False) -> Choice:
    """The kernel to export, or ExportError saying why there is none."""
    if run_id is None or not _timed(store, problem_id, run_id):
        timed = _timed(store, problem_id)
        if not timed:  # naming what the store holds instead is the one read of these tables whole
            frames = [f for f in (store.read("benchmarks"), store.read("baselines")) if not f.empty]
            known = sorted({str(p) for f in frames for p in f.problem_id})
            raise ExportError(f"no run in {store.location} timed problem {problem_id!r}: "
                              + (f"it holds {', '.join(known)}" if known else "the store holds no benchmark"))
        if run_id is not None:
            raise ExportError(f"run {run_id!r} did not time problem {problem_id!r}; runs that did: {', '.join(timed)}")
    options, lost = [], []
    for run in [run_id] if run_id is not None else timed:
        won = winner(store, run)
        if won is None or (won.is_baseline and not (even_if_slower and won.best_candidate_id)):
            lost.append((run, won))
            continue
        cid = won.id if not won.is_baseline else str(won.best_candidate_id)
        bench = latest_full_timing(store, run, cid)
        if bench is not None and bench.speedup_vs_eager is not None:
            options.append(Choice(run_id=run, device=bench.device, candidate_id=cid,
                                  speedup_vs_eager=bench.speedup_vs_eager, verdict=won))
    if not options:
        raise ExportError(_none_won(store, problem_id, lost, even_if_slower))
    return max(options, key=lambda c: (c.beats_baselines, c.device == "cuda", c.speedup_vs_eager))


def _none_won(store: Store, problem_id: str, lost: list[tuple[str, Winner | None]], even_if_slower: bool) -> str:
    """Why nothing is exported, in one line however many runs timed the problem: the runs, the baselines that won them,
    the best candidate any of them timed (GPU runs before CPU runs; its speedup to 3 significant digits) and what to
    do."""
    won_by = Counter(BASELINE_NAMES[w.id] for _, w in lost if w is not None)
    tallies = [f"{name} won {n}" for name, n in won_by.most_common()] + \
        ([f"{n} timed no candidate nor baseline"] if (n := sum(w is None for _, w in lost)) else [])
    text = f"no kernel of {problem_id!r} beat the baselines " + (
        f"in run {lost[0][0]}: " + (f"the baseline {next(iter(won_by))} won" if won_by else "it timed nothing")
        if len(lost) == 1 else f"in {len(lost)} runs: the baseline {', '.join(tallies)}")
    best: tuple[bool, float, str, str, str] | None = None  # (on a GPU, speedup over eager, run, candidate, device)
    for run, w in lost:
        bench = latest_full_timing(store, run, w.best_candidate_id) if w is not None and w.best_candidate_id else None
        if bench is not None and bench.speedup_vs_eager is not None:
            mine = (bench.device == "cuda", bench.speedup_vs_eager, run, bench.candidate_id, bench.device)
            best = max(best, mine) if best else mine
    if best is None:
        return f"{text}; no candidate was verified and timed"
    _, speedup, run, cid, device = best
    where = "" if len(lost) == 1 else f" (run {run})"
    return (f"{text}; the best candidate, {cid}{where}, reached {fmt.speedup(speedup)} eager on {device}" +
            ("" if even_if_slower else "; --even-if-slower exports it anyway, marked as slower"))


def _problem(store: Store, run_id: str, problem_id: str, path: Path | None) -> Problem:
    row = _last(store.read("problems", run_id), id=problem_id)
    if row is not None:
        return model_of(Problem, row)
    if path is None:
        raise ExportError(f"run {run_id} recorded no problem {problem_id!r} (a `kernelflow bench` run): give the "
                          "problem file's path instead of its id")
    return load_problem(path)


def _returns_tuple(problem: Problem, path: Path) -> bool:
    """Whether the reference's forward returns a tuple (then OpModel does too), at its first CPU (else meta) shape."""
    module = import_file(path, f"kf_export_reference_{uuid.uuid4().hex[:8]}")
    cpu = bool(problem.cpu_workloads)
    w = (problem.cpu_workloads or problem.gpu_workloads)[0]
    init = workload_call(module, w, "get_init_inputs", str(path))
    inputs = workload_call(module, w, "get_inputs", str(path), meta=not cpu)
    try:
        with torch.no_grad(), torch.device("cpu" if cpu else "meta"):
            return isinstance(module.Model(*init)(*inputs), (tuple, list))
    except Exception as e:
        raise ExportError(f"the reference does not run at {w.name} on {'CPU' if cpu else 'meta'} tensors, so the "
                          f"custom op's outputs are unknown: {type(e).__name__}: {e}") from e


def _requires(source: str) -> list[str]:
    """Top-level packages the candidate imports, the standard library left out."""
    nodes = list(ast.walk(ast.parse(source)))
    names = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module and not node.level}
    return sorted({n.split(".")[0] for n in names} - set(sys.stdlib_module_names))


def _records_launches(source: str) -> bool:
    """Whether the candidate launches through a template's `_kf_launch` that records (stages/templates/launch.py):
    a module-level `_kf_recording = None` and `def _kf_launch`. Only those exports replay (kernelflow/export_replay.py)."""
    body = ast.parse(source).body
    assigned = {t.id for node in body if isinstance(node, ast.Assign) for t in node.targets if isinstance(t, ast.Name)}
    return "_kf_recording" in assigned and any(isinstance(n, ast.FunctionDef) and n.name == "_kf_launch" for n in body)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _identifier(name: str) -> str:
    return re.sub(r"\W", "_", name)


def _blobs(store: Store, staging: Path, results: dict[str, BaseModel | None]) -> list[str]:
    """The stages' blobs as files: kind:key (ptx, cubin, sass, cu) under binaries/, the rest (logs) under logs/."""
    written = []
    for stage, res in results.items():
        for name, sha in getattr(res, "blobs", {}).items():
            kind, _, key = name.partition(":")
            rel = f"binaries/{_safe(key)}.{kind}" if key else f"logs/{stage}.{_safe(name)}.txt"
            (staging / rel).parent.mkdir(exist_ok=True)
            (staging / rel).write_bytes(store.blob(sha))
            written.append(rel)
    return written


def _verdict(choice: Choice, bench: BenchmarkResult) -> str:
    won = choice.verdict
    prov = next((t.provenance for t in bench.timings if t.contender == "candidate"), None)
    where = f"{prov.device_name if prov else choice.device} ({bench.sizes} shapes, geomean)"
    if choice.device == "cpu":
        where += "; CPU times (Triton through its interpreter) say nothing about GPU speed"
    if choice.beats_baselines:
        vs_compile = f", {fmt.speedup(won.speedup_vs_compile)} torch.compile" if won.speedup_vs_compile else ""
        return f"The winner of run {choice.run_id}: {fmt.speedup(won.speedup_vs_eager)} eager PyTorch{vs_compile}, on {where}."
    return (f"NOT FASTER THAN WHAT YOU HAVE; exported only because it was asked for (--even-if-slower). Run "
            f"{choice.run_id}: {won.text}. This candidate: {fmt.speedup(choice.speedup_vs_eager)} eager, on {where}.")


def _run_note(candidate: Candidate, requires: list[str]) -> str:
    notes = {"triton": "Without a GPU, Triton kernels run only through Triton's interpreter: set TRITON_INTERPRET=1 "
                       "before triton is imported.",
             "cuda": "Importing builds the CUDA extension with torch's load_inline (nvcc and a CUDA build of torch; "
                     "cached under TORCH_EXTENSIONS_DIR); it runs on a GPU only.",
             "cute": "Importing builds the CuTe extension with torch's load_inline on the CUTLASS headers (nvcc, a "
                     "CUDA build of torch, nvidia-cutlass); it runs on a GPU only.",
             "torch": "A plain-PyTorch candidate."}
    made = generated_with(candidate)
    note = (f" Its kernels are torch.compile's (Inductor's) code as torch {made['torch']} with Triton {made['triton']} "
            f"wrote them: run it with torch=={made['torch']} and triton=={made['triton']}." if made else "")
    return (f"Requires {', '.join(requires) or 'nothing beyond the standard library'}. {notes[candidate.backend]}"
            f"{note}\n")


def generated_with(candidate: Candidate) -> dict[str, str] | None:
    """The torch and Triton versions a generated kernel was written by (the inductor family records them in its
    parameters), or None for a kernel no tool generated."""
    params = candidate.origin.params
    if isinstance(params.get("torch"), str) and isinstance(params.get("triton"), str):
        return {"torch": params["torch"], "triton": params["triton"]}
    return None


class Sources(BaseModel):
    """What the store holds of the chosen candidate, as the stages recorded it."""

    candidate: Candidate
    verify: VerifyResult  # its fullest passed verification
    compiled: CompileResult | None  # None where the run kept no compile row
    bench: BenchmarkResult  # the benchmark call the verdict used
    problem: Problem  # as the run recorded it
    code_version: str


def _gather(store: Store, choice: Choice, problem_id: str, path: Path | None) -> Sources:
    run, cid = choice.run_id, choice.candidate_id
    row = _last(store.read("candidates", run), id=cid)
    verified = store.read("verifications", run)
    verified = verified[(verified.candidate_id == cid) & (verified.status == "ok")] if not verified.empty else verified
    if row is None or verified.empty:
        raise ExportError(f"run {run} has no {'passed verification' if row else 'source'} of candidate {cid}")
    compiled = _last(store.read("compiles", run), candidate_id=cid, status="ok")
    bench = latest_full_timing(store, run, cid)
    assert bench is not None  # choose() found it
    record = _last(store.runs(run))
    prov = next((t.provenance for t in bench.timings if t.contender == "candidate"), None)
    return Sources(candidate=model_of(Candidate, row), bench=bench, problem=_problem(store, run, problem_id, path),
                   verify=model_of(VerifyResult, verified.sort_values("trials_passed", kind="stable").iloc[-1].to_dict()),
                   compiled=model_of(CompileResult, compiled) if compiled else None,
                   code_version=record["code_version"] if record else prov.code_version if prov else "unknown")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(src: Sources, choice: Choice, selected_from: str, custom_op: dict[str, Any],
              files: dict[str, str]) -> dict[str, Any]:
    spec, bench, prov = src.problem, src.bench, next((t.provenance for t in src.bench.timings
                                                       if t.contender == "candidate"), None)
    return {
        "format": FORMAT,
        "exported_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "problem": {"id": spec.id, "source_sha256": spec.source_sha256, "dtype": spec.dtype,
                    "tolerance": spec.tolerance.model_dump(), "policy": spec.policy.model_dump(),
                    "workloads": {"gpu": [w.model_dump() for w in spec.gpu_workloads],
                                  "cpu": [w.model_dump() for w in spec.cpu_workloads]}},
        "candidate": {"id": src.candidate.id, "backend": src.candidate.backend, "parent_id": src.candidate.parent_id,
                      "origin": src.candidate.origin.model_dump(), "source_sha256": files["model_new.py"]},
        "run_id": choice.run_id,
        "selected_from": selected_from,
        "beats_baselines": choice.beats_baselines,
        "winner": choice.verdict.model_dump(),
        "speedup_vs_eager": choice.speedup_vs_eager,
        "speedup_vs_compile": bench.speedup_vs_compile,
        "device": choice.device,
        "sizes": bench.sizes,
        "timings": [t.model_dump(exclude={"provenance", "problem_id"}) for t in bench.timings],
        "measured_with": prov.model_dump() if prov else None,
        "verification": src.verify.model_dump(exclude={"blobs", "candidate_id", "problem_id"}),
        "compile": src.compiled.model_dump(include={"arch", "mode", "toolchain", "kernels", "library_calls"})
        if src.compiled else None,
        "code_version": src.code_version,
        "requires": _requires(src.candidate.source),
        "generated_with": generated_with(src.candidate),
        "custom_op": custom_op,
        "files": files,
    }


def _refuse_to_overwrite(out: Path, force: bool) -> None:
    if not out.name.isidentifier():
        raise ExportError(f"{out}: the export is a Python package named after its folder, so the folder's name must "
                          "be a Python identifier (e.g. silu_kernel)")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise ExportError(f"{out} exists and is not empty; --force replaces an earlier export")
        if not (out / "manifest.json").is_file():
            raise ExportError(f"{out} is not an earlier export (it has no manifest.json): --force replaces only those")


def export(store: Store, problem: str, out: str | Path, run_id: str | None = None, even_if_slower: bool = False,
           force: bool = False) -> dict[str, Any]:
    """Write the package for `problem` (an id, or a problem file's path) to `out`; returns its manifest."""
    out = Path(out).resolve()
    path = Path(problem) if problem.endswith(".py") else None
    problem_id = path.stem if path else problem
    _refuse_to_overwrite(out, force)
    choice = choose(store, problem_id, run_id, even_if_slower)
    src = _gather(store, choice, problem_id, path)
    staging = out.parent / f".{out.name}.tmp-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        (staging / "model_new.py").write_text(src.candidate.source)
        (staging / "reference.py").write_text(src.problem.source)
        shutil.copyfile(OP_SOURCE, staging / "op.py")
        replays = _records_launches(src.candidate.source)
        if replays:
            shutil.copyfile(REPLAY_SOURCE, staging / "replay.py")
        blobs = _blobs(store, staging, {"compile": src.compiled, "verify": src.verify})
        files = {rel: _sha256(staging / rel)
                 for rel in ["model_new.py", "reference.py", "op.py", *(["replay.py"] if replays else []), *blobs]}
        custom_op = {"name": f"kf_export::k_{_identifier(problem_id)}_{choice.candidate_id}",
                     "returns_tuple": _returns_tuple(src.problem, staging / "reference.py")}
        manifest = _manifest(src, choice, f"run {run_id}" if run_id else "every run of the problem in the store",
                             custom_op, files)
        manifest["host_path"] = "replay" if replays else "forward"
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
        env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
        (staging / "__init__.py").write_text(env.from_string(INIT_TEMPLATE.read_text()).render(
            problem_id=problem_id, backend=src.candidate.backend, candidate_id=choice.candidate_id,
            run_id=choice.run_id, package=out.name, exported_at=manifest["exported_at"],
            verdict=_verdict(choice, src.bench), op_name=custom_op["name"],
            run_note=_run_note(src.candidate, manifest["requires"]),
            binaries=", ".join(f for f in blobs if f.startswith("binaries/")) or "nothing, for this backend",
            replays=replays))
        if out.exists():
            shutil.rmtree(out)
        staging.replace(out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest
