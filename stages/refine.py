"""Refine stage: the micro-profiling tools' findings on one candidate, as Feedback (KernelPro's stage two).

`run(req)` takes the bottleneck class from the evidence, else decides it (stages/measure/bottleneck.py: counters, else
counted work), runs the tools that class selects (kernelflow.stages.measure.tools.select) and keeps their findings (below
MIN_SEVERITY they are noise and dropped): causes first, most severe first, then the findings another finding on
the same kernel explains (a tool's EXPLAINS: e.g. long-scoreboard stalls under low occupancy), marked
`explained_by`, and last those on a kernel the candidate did not compile (a library call's: `not_own`, context
for a generator, never an action for the builtin proposer); at most max_findings. It renders `text`: a compact
plain-words block for a generator's prompt (class, time against the SOL floor, then each finding as diagnosis ->
recommendation). Pure: no GPU, no I/O, no Prefect.
"""

from __future__ import annotations

from pydantic import Field

from kernelflow.stages.contracts import BASELINE_LABELS, Contract, Feedback, Finding
from kernelflow.stages.measure.bottleneck import bound_of
from kernelflow.stages.measure.tools import Evidence, base_name, explains, select

MIN_SEVERITY = 0.01  # findings estimated to recover less than 1% of the time are left out
NOT_OWN = ("a library kernel the candidate calls, not its code: another library call, layout or precision, or "
           "writing this part itself, would change it")


class RefineRequest(Contract):
    evidence: Evidence = Field(description="what the tools read: profile, binaries, counted work, peaks")
    max_findings: int | None = Field(default=None, ge=1, description="keep at most this many findings; None: all")


def feedback_text(ev: Evidence, source: str | None, findings: list[Finding]) -> str:
    """The findings as prompt-ready plain text."""
    lines = [f"Bottleneck class: {ev.bound or 'unknown'}" + (f" (decided by {source})." if source else ".")]
    if ev.contender != "candidate":
        lines.insert(0, f"Baseline: the reference as {BASELINE_LABELS[ev.contender]}.")
    if ev.time_us is not None and ev.sol_floor_us:
        lines.append(f"Time {ev.time_us:.1f} us against a speed-of-light floor of {ev.sol_floor_us:.1f} us "
                     f"({ev.sol_floor_us / ev.time_us:.0%} of speed of light).")
    if not findings:
        lines.append("No micro-profiling tool found a specific problem.")
    for i, f in enumerate(findings, 1):
        where = f" in {f.kernel}" if f.kernel else ""
        cause = f", likely a consequence of {f.explained_by}" if f.explained_by else ""
        advice = (f"{NOT_OWN} (what the tool would change: {f.recommendation})" if f.not_own else f.recommendation)
        lines.append(f"{i}. [{f.tool}, ~{f.severity:.0%} of the time{cause}]{where}: {f.diagnosis} -> {advice}")
    return "\n".join(lines)


def not_own(ev: Evidence, found: list[Finding]) -> list[Finding]:
    """The findings, those on a kernel the candidate did not compile or define (a library call's) marked not_own: for
    a candidate whose own kernels are known, any other profiled kernel is a vendor library's (or PyTorch's). A kernel
    it defines but did not launch on the compiled shape (a looped kernel of longer rows) is its own."""
    own = {base_name(b.name) for b in ev.binaries} | {base_name(name) for name in ev.defined}
    if ev.contender != "candidate" or not own:
        return found
    return [f.model_copy(update={"not_own": True}) if f.kernel and base_name(f.kernel) not in own else f
            for f in found]


def aimed(found: list[Finding]) -> list[Finding]:
    """The findings, each action naming the kernel its finding is on (params["kernel"], a bare function name), so a
    template with several kernels moves that kernel's own parameters first (stages/proposers/mutations.py)."""
    return [f.model_copy(update={"action": f.action.model_copy(
        update={"params": {**f.action.params, "kernel": base_name(f.kernel)}})}) if f.kernel else f for f in found]


def causes_first(found: list[Finding]) -> list[Finding]:
    """The findings, each marked with the most severe other finding that explains it on the same kernel (or on
    the whole call)."""
    out = []
    for f in found:
        causes = [g for g in found if g is not f and f.tool in explains(g.tool) and g.kernel in (f.kernel, None)]
        cause = max(causes, key=lambda g: g.severity, default=None)
        out.append(f.model_copy(update={"explained_by": cause.tool}) if cause else f)
    return out


def run(req: RefineRequest) -> Feedback:
    ev = req.evidence
    source = None  # a class given with the evidence is reported as given
    if ev.bound is None:
        bound, source = bound_of(ev.profile, ev.work, ev.peaks, ev.time_us)
        ev = ev.model_copy(update={"bound": bound})
    tools = select(ev.bound)
    found = [f for t in tools for f in t.check(ev) if f.severity >= MIN_SEVERITY]
    findings = sorted(not_own(ev, causes_first(aimed(found))),
                      key=lambda f: (f.not_own, f.explained_by is not None, -f.severity))
    findings = findings[:req.max_findings]
    return Feedback(problem_id=ev.problem_id, candidate_id=ev.candidate_id, contender=ev.contender, bound=ev.bound,
                    tools_run=[t.NAME for t in tools], findings=findings, text=feedback_text(ev, source, findings))


if __name__ == "__main__":
    from kernelflow.stages.entry import stage_main

    stage_main(RefineRequest, run)
