"""Verify a candidate against the reference (DESIGN.md, "How we verify"). A kernel is wrong until shown right.

Per workload, `trials` fresh draws cycling through several input distributions; reference in float64 on
upcast inputs; outputs NaN-poisoned (uninitialized memory is filled with NaN); NaN/Inf, all-zero, structure,
tolerance, input mutation and a second call on the same inputs all checked. The tolerance is the problem's; where
eager PyTorch itself misses it on a trial's inputs, the bound is eager's own error times compare.EAGER_MARGIN, and
the log and a mismatch say so (stages/harness/compare.py).

Library policy: every forward call runs under a census of the torch operators it dispatches
(stages/harness/library_policy.py). An op the policy forbids (torch math standing in for a kernel; cuBLAS/cuDNN when
vendor libraries are off) fails the candidate as `policy_violation`, before its output is judged; where the same
call also converted data to a less precise dtype, the verdict is the precision downgrade (`cheat`, below), naming
both. The policy is the request's if it carries one (a campaign's), else the problem's. The constructor is not
counted.

Integrity (docs/INTEGRITY.md): the source passes the static checks first (stages/harness/static_checks.py); the import,
each constructor and each call run in a guarded section (stages/harness/integrity.py: nothing of the harness replaced, no
setting changed, no thread left running, no network, no write outside the work dir, no secret read). Each call's
kernel launches are counted (stages/harness/launches.py): a call that launches none after earlier calls on the workload
did returns a remembered result; a right output from no kernel and no op that computes, or (where the policy
forbids torch compute) a right output with every Triton launch made a no-op (ghost replay), was computed somewhere
the census cannot see. A cast to a dtype less precise than the problem's is a precision downgrade. When every workload
of the size sets is verified, one held-out shape the candidate was never shown is verified too
(stages/problems/held_out.py; for a plain KernelBench file, derived from the module constants its get_inputs and
get_init_inputs read); failing only there, or the stage process dying there, is shape hard-coding. All of these
fail the candidate as `cheat`.
"""

from __future__ import annotations

import contextlib
import copy
import io
import time
import traceback
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import torch

from kernelflow.stages import phase
from kernelflow.stages.contracts import FailureKind, VerifyRequest, VerifyResult, Workload
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness import launches, static_checks
from kernelflow.stages.harness.candidate import load_model_class
from kernelflow.stages.harness.compare import EAGER_MARGIN, as_list, eager_ratio, judge, limit, widened
from kernelflow.stages.harness.instantiate import build, guarded, set_precision
from kernelflow.stages.harness.integrity import Guard, deterministic
from kernelflow.stages.harness.library_policy import Census, downcasts, listing, op_class, violation
from kernelflow.stages.problems.held_out import MAX_SETTING, held_out_of
from kernelflow.stages.problems.inputs import DISTRIBUTIONS, clone, draw, trial_seed, upcast
from kernelflow.stages.problems.kernelbench import import_problem

Result = VerifyResult
Loaded = tuple[type[torch.nn.Module], Guard]  # a candidate's ModelNew and the guard it was imported under


def failed(req: VerifyRequest, kind: FailureKind, message: str, files: dict[str, str] | None = None) -> VerifyResult:
    return VerifyResult(candidate_id=req.candidate.id, problem_id=req.problem.id, status="failed", failure_kind=kind,
                        message=message, files=files or {}, device=req.device, sizes=req.sizes)


def poison_device_cache(nbytes: int) -> None:
    """Fill the CUDA caching allocator's free blocks with NaN so outputs it hands out start as NaN."""
    if torch.cuda.is_available():
        junk = torch.empty(max(nbytes, 1 << 20) // 4, dtype=torch.float32, device="cuda").fill_(float("nan"))
        del junk


def _same(a: list, b: list) -> bool:
    return all(not isinstance(x, torch.Tensor) or torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _finite(values: Any) -> bool:
    return all(torch.isfinite(r).all() for r in as_list(values) if r.is_floating_point())


class _Checks:
    """One verify call: the request, the problem's module, the candidate's class, its guard and the log."""

    def __init__(self, req: VerifyRequest, module: ModuleType, new_cls: type, guard: Guard, log: io.StringIO):
        self.req, self.module, self.new_cls, self.guard, self.log = req, module, new_cls, guard, log
        self.policy, self.problem = req.effective_policy, req.problem
        self.launched: list[int] = []  # kernels launched per call, this workload
        self.ref_computes = True  # whether the reference does any work beyond allocation, views and copies

    def build(self, w: Workload) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
        with self.guard.section(f"{w.name} constructor"):
            ref, new = build(self.module, self.new_cls, w, self.req.device, seed=trial_seed(self.req.seed, w.name, "init"))
        assert new is not None
        self.launched = []
        return ref, copy.deepcopy(ref).double() if self.policy.reference_fp64 else ref, new

    def expect(self, ref: Any, ref64: Any, inputs: list[Any], census: bool = False) -> tuple[Any, Any]:
        counted = Census()
        with torch.no_grad(), counted if census else contextlib.nullcontext():
            expect = ref(*clone(inputs))
        if census:
            self.ref_computes = any(op_class(op) != "always" for op in counted.counts)
        with torch.no_grad():
            return expect, ref64(*upcast(inputs)) if self.policy.reference_fp64 else expect

    def call(self, new: Any, inputs: list[Any], expect: Any, expect64: Any, what: str,
             census_of: str | None) -> tuple[Any, float]:
        """One forward call, every check (the census logged under `census_of`); returns the output and its error
        ratio."""
        kept = clone(inputs)
        poison_device_cache(4 * sum(r.numel() * r.element_size() for r in as_list(expect)))
        with self.guard.section(what) as section, torch.no_grad(), Census() as census:
            out = guarded(new, *inputs)
        if census_of:
            self.log.write(f"{census_of}: the forward dispatches {listing(census.counts) or 'no torch ops'}, "
                           f"launches {section.launches} kernels\n")
        why = violation(census.counts, self.policy)
        if (down := downcasts(census.casts, self.problem.dtype)) is not None:  # the cheat outranks the ops it used
            raise CandidateFault("cheat", f"{what}: precision downgrade: the forward converts {self.problem.dtype} "
                                 f"data to a less precise dtype ({down})" + (f"; and {why}" if why else ""))
        if why is not None:
            raise CandidateFault("policy_violation", f"{why} [{what}]")
        if not _same(inputs, kept):
            raise CandidateFault("input_mutation", f"{what}: the candidate modified its inputs")
        if section.launches == 0 and any(self.launched):
            raise CandidateFault("cheat", f"{what}: launched no kernel where its earlier calls on this workload "
                                 f"launched {max(self.launched)}: it returned a remembered result (memoization/replay)")
        self.launched.append(section.launches)
        ratio = judge(out, expect64, expect, self.problem.tolerance, what)
        works = section.launches or any(op_class(op) != "always" for op in census.counts)
        if not works and self.ref_computes:
            raise CandidateFault("cheat", f"{what}: the output is right, yet the forward launched no kernel and "
                                 "dispatched no op that computes: it was computed where the census cannot see (host "
                                 "code, a cache, the reference's own result)")
        return out, ratio

    def trial(self, w: Workload, ref: Any, ref64: Any, new: Any, t: int) -> tuple[float, float] | None:
        """Trial t at w: (worst error ratio, eager's), or None when the reference is not finite on its inputs."""
        dist = list(DISTRIBUTIONS)[t % len(DISTRIBUTIONS)]
        what = f"{w.name} trial {t} ({dist} inputs)"
        inputs = draw(self.module, w, trial_seed(self.req.seed, w.name, t), dist, self.req.device)
        expect, expect64 = self.expect(ref, ref64, inputs, census=t == 0)
        if not _finite(expect64):
            self.log.write(f"{what}: skipped, the reference is not finite on these inputs\n")
            return None
        eager = max(eager_ratio(e, r, self.problem.tolerance)
                    for e, r in zip(as_list(expect), as_list(expect64), strict=True))
        if wider := widened(eager):
            self.log.write(f"{what}: {wider} (the precision eager uses, e.g. cuDNN's TF32, or TOLERANCE too tight)\n")
        (out1, r1), (out2, r2) = (self.call(new, inputs, expect, expect64, f"{what} call {c}",
                                            w.name if t == 0 and c == 1 else None) for c in (1, 2))
        if not all(torch.equal(a, b) for a, b in zip(as_list(out1), as_list(out2), strict=True)):
            self.log.write(f"{what}: second call differs bitwise (within tolerance)\n")
        self.log.write(f"{what}: ok, error ratio {max(r1, r2):.3g} (eager {eager:.3g}" +
                       (f"; bound {limit(eager):.3g}x, eager's own error x{EAGER_MARGIN:g})\n" if wider else ")\n"))
        return max(r1, r2), eager

    def ghost(self, w: Workload, ref: Any, ref64: Any, new: Any) -> None:
        """Where the policy forbids torch compute: with its Triton launches made no-ops (fresh inputs, so a buffer
        kept from an earlier call does not answer), the output must be wrong."""
        if self.policy.allow_torch_compute or not any(self.launched):
            return
        inputs = draw(self.module, w, trial_seed(self.req.seed, w.name, "ghost"), "declared", self.req.device)
        expect, expect64 = self.expect(ref, ref64, inputs)
        if not _finite(expect64):
            return
        before, what = launches.suppressed(), f"{w.name} ghost replay"
        try:
            with self.guard.section(what), torch.no_grad(), launches.ghost():
                out = guarded(new, *inputs)
            if launches.suppressed() == before:
                return  # nothing to disable: its launches are extension calls
            judge(out, expect64, expect, self.problem.tolerance, what)
        except CandidateFault as fault:
            if fault.kind == "cheat":
                raise
            self.log.write(f"{what}: with its Triton launches made no-ops the output fails ({fault.kind}): the "
                           "kernels do the work\n")
            return
        raise CandidateFault("cheat", f"{what}: with its {launches.suppressed() - before} Triton launches made no-ops "
                             "the output is still right: the kernels are decoration, the result comes from elsewhere")

    def held_out(self, workloads: list[Workload]) -> None:
        """One trial at a shape next to the smallest declared one, which the candidate was never shown: the first of
        the held-out shapes (stages/problems/held_out.py: the input sizes moved, then every size) at which the
        reference is usable; each one where it is not is skipped with a note, and where none is there is no check.
        A workload that sets no constant (a plain KernelBench file's) is at the sizes get_inputs/get_init_inputs
        read. A stage process that dies there, whatever code was running, is shape hard-coding too
        (stages/phase.py)."""
        pairs = held_out_of(self.module, workloads, self.problem.gpu_workloads + self.problem.cpu_workloads)
        if not pairs:
            self.log.write("held-out shape: none (neither the workloads nor get_inputs/get_init_inputs name a size "
                           f"above {MAX_SETTING})\n")
        for base, h in pairs:
            try:  # the problem's own limits: a reference that fails or is degenerate there skips the shape
                ref, _ = build(self.module, None, h, self.req.device, seed=trial_seed(self.req.seed, h.name, "init"))
                with torch.no_grad():
                    probe = as_list(ref(*draw(self.module, h, trial_seed(self.req.seed, h.name, 0), "declared",
                                              self.req.device)))
                usable = _finite(probe) and all(p.ne(0).any() for p in probe)
            except Exception as e:
                usable, probe = False, [f"{type(e).__name__}: {e}"[:200]]
            if not usable:
                self.log.write(f"held-out shape {h.params}: skipped, the reference is unusable there "
                               f"({probe[0]!s:.200})\n")
                continue
            where = f"the held-out shape {h.params} (next to {base.name} {base.params}, never shown to the candidate)"
            try:
                with phase.running(where, verdict=("cheat", f"shape hard-coding: right at every declared shape; the "
                                                            f"process died at {where}")):
                    ref, ref64, new = self.build(h)
                    got = self.trial(h, ref, ref64, new, 0)
            except CandidateFault as fault:
                if fault.kind in ("cheat", "policy_violation"):
                    raise
                raise CandidateFault("cheat", f"shape hard-coding: right at every declared shape, but at {where} it "
                                     f"fails: {fault.kind}: {fault.message}") from fault
            if got is None:  # the reference is not finite on the trial's inputs: the next shape
                self.log.write(f"held-out shape {h.params}: skipped, the reference is not finite on the trial's inputs\n")
                continue
            self.log.write(f"held-out shape {h.params}: ok, error ratio {got[0]:.3g}\n")
            return


def _load(req: VerifyRequest) -> tuple[ModuleType, Loaded]:
    """The problem's module, and the candidate's ModelNew imported under a new guard once its source passes the
    static checks."""
    set_precision(req.effective_policy)
    static_checks.check_source(req.candidate.source, req.problem, req.effective_policy)
    module = import_problem(req.problem.path)
    guard = Guard(req.workdir, req.candidate.source)
    with guard.section("import"):
        new_cls = load_model_class(req.candidate, req.workdir, req.device)
    return module, (new_cls, guard)


def _verify(req: VerifyRequest, module: ModuleType, loaded: Loaded,
            log: io.StringIO) -> tuple[int, int, float, float, str | None]:
    problem = req.problem
    checks = _Checks(req, module, *loaded, log)
    passed = skipped = 0
    worst, eager_worst, worst_at = 0.0, 0.0, None
    every = [w for sizes in req.sizes for w in problem.workloads(sizes)]
    chosen = [w for w in every if req.workloads is None or w.name in req.workloads]
    for w in chosen:
        ref, ref64, new = checks.build(w)
        for t in range(req.trials):
            if (got := checks.trial(w, ref, ref64, new, t)) is None:
                skipped += 1
                continue
            passed += 1
            eager_worst = max(eager_worst, got[1])
            if got[0] > worst:
                worst, worst_at = got[0], w.name
        checks.ghost(w, ref, ref64, new)
    if passed == 0:
        raise CandidateFault("mismatch", "no trial could be judged (the reference was never finite)")
    if req.workloads is None:
        checks.held_out(chosen)
    return passed, skipped, worst, eager_worst, worst_at


@contextlib.contextmanager
def _strict_torch() -> Iterator[None]:
    """Deterministic algorithms and NaN-filled fresh allocations while verifying; the process's settings come back
    afterwards (an inline verify must not slow or change the benchmarks that follow in the same process)."""
    det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
    deterministic(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        yield
    finally:
        deterministic(det, warn_only=warn)
        torch.utils.deterministic.fill_uninitialized_memory = fill  # type: ignore[attr-defined]


def checked(req: VerifyRequest) -> tuple[VerifyResult, Loaded | None]:
    """`run`'s result, and when the candidate passed, what was loaded: its ModelNew and the guard it was imported
    under, for a caller that goes on with the candidate in this process (a benchmark's precheck: one import)."""
    started, log, loaded = time.perf_counter(), io.StringIO(), None
    try:
        with _strict_torch():
            module, loaded = _load(req)
            passed, skipped, worst, eager_worst, worst_at = _verify(req, module, loaded, log)
        result = VerifyResult(candidate_id=req.candidate.id, problem_id=req.problem.id, status="ok",
                              message=f"{passed} trials passed, {skipped} skipped", device=req.device,
                              sizes=req.sizes, trials_passed=passed, trials_skipped=skipped, max_err_ratio=worst,
                              eager_err_ratio=eager_worst, worst_workload=worst_at)
    except CandidateFault as fault:
        log.write(traceback.format_exc())
        result, loaded = failed(req, fault.kind, fault.message), None  # type: ignore[arg-type]
    result.files["verify_log"] = req.write("verify_log.txt", log.getvalue())
    result.duration_s = time.perf_counter() - started
    return result, loaded


def run(req: VerifyRequest) -> VerifyResult:
    return checked(req)[0]


if __name__ == "__main__":
    from kernelflow.stages.entry import stage_main

    stage_main(VerifyRequest, run)
