"""Delayed profiling: promoted simple kernels now, complex ones once their structure has settled."""

from kernelflow.stages.contracts import Candidate, CompileResult, KernelBinary, Origin
from kernelflow.stages.measure.profiling_policy import ProfilingPolicy, should_profile, structure


def cand(kernels: list[str], lines: int = 20) -> tuple[Candidate, CompileResult]:
    c = Candidate.make("p", "triton", "\n".join(f"# {i} {kernels}" for i in range(lines)),
                       Origin(kind="builtin", proposer="rowwise"))
    compiled = CompileResult(candidate_id=c.id, problem_id="p", status="ok", backend="triton", arch="sm_90a",
                             mode="ahead_of_time", kernels=[KernelBinary(name=k) for k in kernels])
    return c, compiled


def test_simple_promoted_kernel_is_profiled_and_unpromoted_is_not():
    c, compiled = cand(["k"])
    assert should_profile(ProfilingPolicy(), c, compiled, True, [])[0]
    assert should_profile(ProfilingPolicy(), c, compiled, False, []) == (False, "not promoted by the search")
    assert not should_profile(ProfilingPolicy(enabled=False), c, compiled, True, [])[0]


def test_complex_kernel_waits_for_its_structure_to_settle():
    c, compiled = cand(["a", "b"])
    first = should_profile(ProfilingPolicy(), c, compiled, True, [])
    settled = should_profile(ProfilingPolicy(), c, compiled, True, [structure(c, compiled)])
    changed = should_profile(ProfilingPolicy(), c, compiled, True, ["triton|rowwise|x"])
    assert (first[0], settled[0], changed[0]) == (False, True, False)
    long_single, compiled_single = cand(["k"], lines=400)
    assert not should_profile(ProfilingPolicy(), long_single, compiled_single, True, [])[0]
