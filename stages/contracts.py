"""Pydantic contracts at every stage boundary. A result model is also its Parquet row (see artifacts/tables.py)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator


class Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


Backend = Literal["triton", "cuda", "cute", "torch"]
Device = Literal["cuda", "cpu"]
SizeSet = Literal["gpu", "cpu"]
# compile: torch.compile's default mode; compile_max: mode="max-autotune" (opt-in: its autotuning takes minutes);
# compile_max_nocg: "max-autotune-no-cudagraphs", the same tuning without the CUDA graph, whose replay copies every
# fresh input into the graph's own buffers first (that copy can make max-autotune slower than default: docs/LOG.md)
Baseline = Literal["eager", "compile", "compile_max", "compile_max_nocg"]
Contender = Literal["candidate", "eager", "compile", "compile_max", "compile_max_nocg"]  # what a row measured
BASELINE_LABELS: dict[str, str] = {"eager": "eager PyTorch", "compile": "torch.compile",
                                   "compile_max": "torch.compile (max-autotune)",
                                   "compile_max_nocg": "torch.compile (max-autotune-no-cudagraphs)"}
FailureKind = Literal[
    "compile_error",  # the toolchain rejected the source
    "import_error",  # the module failed to import or defines no ModelNew
    "signature_mismatch",  # ModelNew's constructor or forward does not accept the problem's arguments
    "runtime_error",  # an exception inside the candidate's forward
    "illegal_address",  # the GPU reported an illegal memory access (context poisoned)
    "oom",  # out of memory on the device or host
    "timeout",  # the stage process was killed at its deadline
    "crash",  # the stage process died without writing a result (segfault, os._exit, abort)
    "mismatch",  # outputs outside tolerance, wrong shape or dtype
    "nan",  # NaN/Inf (or unwritten, NaN-poisoned) elements where the reference is finite
    "all_zero",  # an all-zero output against a nonzero reference
    "input_mutation",  # the candidate changed its inputs
    "nondeterministic",  # a second call on the same inputs disagreed
    "cheat",  # a harness-evading output (tensor subclass, aliasing) or behaviour
    "policy_violation",  # the forward calls torch ops the policy forbids (stages/harness/library_policy.py)
    "unavailable",  # the backend cannot run here (no nvcc, no GPU); says why
]


class Workload(Contract):
    """One shape of a problem: module-level constants overridden by name."""

    name: str = Field(description="stable name, e.g. 'gpu0' or 'cpu0'")
    params: dict[str, int] = Field(description="module-level constant -> value for this shape")


class Tolerance(Contract):
    """Elementwise check |out - ref| <= atol * rms(ref) + rtol * |ref| against a float64 reference."""

    rtol: float = Field(description="relative tolerance per element")
    atol: float = Field(description="absolute tolerance, in units of the reference's RMS")


DEFAULT_TOLERANCE: dict[str, Tolerance] = {
    "float32": Tolerance(rtol=1e-4, atol=1e-4),
    "float64": Tolerance(rtol=1e-7, atol=1e-7),
    "float16": Tolerance(rtol=1e-2, atol=1e-2),
    "bfloat16": Tolerance(rtol=2e-2, atol=2e-2),
}


class Policy(Contract):
    """What a candidate may do; enforced by verify (library calls: stages/harness/library_policy.py)."""

    allow_tf32: bool = Field(default=False, description="fp32 matmuls may use TF32 (in candidate and baselines; "
                             "convolutions too)")
    conv_tf32: bool = Field(default=True, description="fp32 convolutions may use TF32, as cuDNN does by default in "
                            "PyTorch (in candidate and baselines)")
    allow_vendor_libraries: bool = Field(
        default=True, description="cuBLAS/cuDNN calls (torch matmul/conv) allowed for matmul/conv parts"
    )
    allow_torch_compute: bool = Field(
        default=False, description="the forward may compute with any torch op (plain-PyTorch candidates); else only "
        "kernels, allocation, views, copies and the vendor calls above may run"
    )
    reference_fp64: bool = Field(default=True, description="compute the reference in float64 on upcast inputs")


class Problem(Contract):
    """A KernelBench-format problem file, loaded and checked."""

    id: str = Field(description="file stem, e.g. '01_softmax'")
    path: str = Field(description="absolute path of the .py file when loaded")
    source: str = Field(description="the file's text")
    source_sha256: str = Field(description="sha256 of source")
    dtype: str = Field(description="floating dtype of the inputs, e.g. 'float32'")
    gpu_workloads: list[Workload] = Field(description="realistic GPU shapes (timing and verification on cuda)")
    cpu_workloads: list[Workload] = Field(description="small shapes for CPU verification and tests")
    tolerance: Tolerance = Field(description="the verification tolerance")
    policy: Policy = Field(default_factory=Policy, description="what candidates may do")

    def workloads(self, sizes: SizeSet) -> list[Workload]:
        return self.gpu_workloads if sizes == "gpu" else self.cpu_workloads


class Origin(Contract):
    """Where a candidate came from."""

    kind: Literal["builtin", "llm", "user", "baseline"] = Field(description="proposer family")
    proposer: str = Field(description="registry name of the proposer or template, e.g. 'rowwise'")
    params: dict[str, Any] = Field(default_factory=dict, description="template parameters (tiles, warps, ...)")
    model: str | None = Field(default=None, description="LLM model name, when an LLM wrote it")
    prompt_sha256: str | None = Field(default=None, description="hash of the rendered prompt, when an LLM wrote it")


class Candidate(Contract):
    """A module source defining ModelNew; its id is the content hash of backend and source."""

    id: str = Field(description="sha256(backend + source)[:16]")
    problem_id: str = Field(description="the problem it solves")
    parent_id: str | None = Field(default=None, description="the candidate it was derived from")
    backend: Backend = Field(description="triton, cuda (load_inline C++), cute (load_inline C++ on the CUTLASS/CuTe "
                             "headers) or torch (plain PyTorch)")
    source: str = Field(description="Python module text defining class ModelNew")
    origin: Origin = Field(description="proposer and parameters, or model and prompt hash")

    @classmethod
    def make(cls, problem_id: str, backend: Backend, source: str, origin: Origin, parent_id: str | None = None):
        cid = sha256_text(backend + "\n" + source)[:16]
        return cls(id=cid, problem_id=problem_id, parent_id=parent_id, backend=backend, source=source, origin=origin)


class StageRequest(Contract):
    """Common fields of every request that runs candidate code."""

    workdir: str = Field(description="a private directory for this call (candidate file, build files, what the "
                         "call makes)")
    cache_dir: str | None = Field(default=None, description="a directory the calls of one store share for build "
                                  "caches (load_inline's extensions under torch_extensions/); None: the tools' own")
    timeout_s: float = Field(default=600.0, description="deadline for the whole stage call, in seconds")

    def write(self, relpath: str, data: str | bytes) -> str:
        """`data` written to `relpath` under the work dir (parents made); returns `relpath`, to name in a result's
        `files`."""
        path = Path(self.workdir) / relpath
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return relpath


class StageResult(Contract):
    """Common fields of every stage result (each is one Parquet row)."""

    candidate_id: str = Field(description="the candidate judged")
    problem_id: str = Field(description="the problem")
    status: Literal["ok", "failed"] = Field(description="ok, or failed with failure_kind")
    failure_kind: FailureKind | None = Field(default=None, description="why it failed; None when ok")
    message: str = Field(default="", description="human-readable reason or summary")
    duration_s: float | None = Field(default=None, description="wall time of the stage call, seconds")
    files: dict[str, str] = Field(default_factory=dict, json_schema_extra={"column": False},
                                  description="what the call made, by name (log, ptx, ...): paths relative to the "
                                  "request's work dir; whoever records the result keeps each as a blob in `blobs` "
                                  "(not a table column)")
    blobs: dict[str, str] = Field(default_factory=dict, description="artifact name -> blob sha256 (log, ptx, ...): "
                                  "the `files` kept in the store")
    sandbox: dict[str, str] = Field(default_factory=dict, description="subprocess executor: sandbox feature "
                                    "(environment, temp_dir, cpu_time, file_size, core_dumps, processes, memory, "
                                    "network) -> 'applied: ...' or 'not applied: why' (stages/executors/sandbox.py); empty "
                                    "inline and in docker, whose container is the sandbox")


class CompileRequest(StageRequest):
    candidate: Candidate
    arch: str = Field(default="sm_90a", description="target architecture for nvcc / Triton")
    problem: Problem | None = Field(
        default=None, description="the problem, so Triton kernels can be specialized and compiled ahead of time"
    )
    candidate_code_s: float = Field(default=60.0, gt=0, description="deadline of each stretch of candidate code in "
                                    "the compile (its import; a capture's constructor, forward), seconds; work that "
                                    "takes seconds. The toolchain's compiles are not counted")


class KernelBinary(Contract):
    """One compiled kernel and its resource usage."""

    name: str = Field(description="kernel (function) name")
    registers: int | None = Field(default=None, description="registers per thread (ptxas)")
    shared_bytes: int | None = Field(default=None, description="static shared memory per block, bytes")
    spill_stores_bytes: int | None = Field(default=None, description="bytes spilled to local memory (stores)")
    spill_loads_bytes: int | None = Field(default=None, description="bytes loaded back from local memory")
    stack_bytes: int | None = Field(default=None, description="stack frame per thread, bytes")
    sass: dict[str, int | float | None] | None = Field(
        default=None, description="static SASS instruction statistics, see stages/backends/sass.py (SassStats)")


class CompileResult(StageResult):
    backend: Backend = Field(description="backend compiled")
    arch: str = Field(description="target architecture")
    mode: Literal["ahead_of_time", "on_gpu_worker", "none"] = Field(
        description="ahead_of_time: binaries built here; on_gpu_worker: checked here, built where it runs"
    )
    toolchain: dict[str, str] = Field(default_factory=dict, description="tool -> version (nvcc, triton, torch)")
    kernels: list[KernelBinary] = Field(default_factory=list, description="kernels found and their resources")
    library_calls: list[str] = Field(default_factory=list, description="cuBLAS/cuDNN ops (e.g. aten.mm) the "
                                     "captured forward called: work whose kernels are not among `kernels`")
    defined: list[str] = Field(default_factory=list, description="kernel functions the module defines, launched "
                               "on the captured shape or not (a looped kernel taken only by longer rows): the "
                               "candidate's own, whatever shape it is profiled on")


def known_workloads(named: list[str] | None, known: list[str]) -> None:
    """A request may name only workloads of its size sets."""
    if named is not None and not set(named) <= set(known):
        raise ValueError(f"unknown workloads {sorted(set(named) - set(known))}; known: {known}")


class VerifyRequest(StageRequest):
    problem: Problem
    candidate: Candidate
    device: Device = "cpu"
    sizes: list[SizeSet] = Field(default=["cpu"], description="workload sets to verify on")
    trials: int = Field(default=5, ge=1, description="fresh-input trials per workload")
    workloads: list[str] | None = Field(default=None, min_length=1, description="names of the workloads to verify, "
                                        "e.g. ['cpu0'] (a ladder's policy gate); None: every workload of `sizes`")
    seed: int = Field(default=0, description="base seed; trials derive their own")
    policy: Policy | None = Field(default=None, description="a campaign's policy; None: the problem's own")

    @model_validator(mode="after")
    def _known_workloads(self) -> VerifyRequest:
        known_workloads(self.workloads, [w.name for s in self.sizes for w in self.problem.workloads(s)])
        return self

    @property
    def effective_policy(self) -> Policy:
        """The request's policy if given, else the problem's."""
        return self.policy or self.problem.policy


class VerifyResult(StageResult):
    device: Device = Field(description="where it ran")
    sizes: list[SizeSet] = Field(description="workload sets verified")
    trials_passed: int = Field(default=0, description="trials that passed, over all workloads")
    trials_skipped: int = Field(default=0, description="trials skipped because the reference itself was non-finite")
    max_err_ratio: float | None = Field(default=None, description="max over elements of |err| / allowed; <= 1 passes "
                                        "(or up to EAGER_MARGIN x eager's, where eager's is above 1)")
    eager_err_ratio: float | None = Field(default=None, description="the same ratio for eager PyTorch; above 1 it "
                                          "widens the bound (stages/harness/compare.py)")
    worst_workload: str | None = Field(default=None, description="workload where the worst error occurred")


class BenchmarkRequest(StageRequest):
    problem: Problem
    candidate: Candidate | None = Field(default=None, description="None times only the baselines")
    device: Device = "cpu"
    sizes: SizeSet = "cpu"
    baselines: list[Baseline] = Field(default=["eager", "compile"], description="baselines timed alongside")
    min_reps: int = Field(default=20, ge=3, description="repetitions per contender before the stop test")
    max_reps: int = Field(default=300, ge=3, description="repetitions per contender at most")
    target_rel_ci: float = Field(default=0.02, description="stop when the 95% CI width / median is below this")
    budget_s: float = Field(default=30.0, description="timing budget per workload, seconds")
    workloads: list[str] | None = Field(default=None, min_length=1, description="names of the workloads to time, "
                                        "e.g. ['gpu0'] (a ladder's cheap rung); None: every workload of `sizes`")
    precheck: list[str] | None = Field(default=None, min_length=1, description="workloads of any size set verified "
                                       "first, one trial each, in this process (a ladder's gate and cheap rung in one "
                                       "call); a failure there fails the call before anything is timed")
    seed: int = 0

    @model_validator(mode="after")
    def _known_workloads(self) -> BenchmarkRequest:
        known_workloads(self.workloads, [w.name for w in self.problem.workloads(self.sizes)])
        known_workloads(self.precheck, [w.name for s in ("cpu", "gpu") for w in self.problem.workloads(s)])
        return self


class Provenance(Contract):
    """Where and with what a number was measured."""

    device: Device = Field(description="cuda or cpu; CPU numbers are never compared with GPU numbers")
    device_name: str = Field(description="GPU name or CPU model")
    driver: str | None = Field(default=None, description="NVIDIA driver version")
    sm_clock_mhz: int | None = Field(default=None, description="SM clock when measured")
    mem_clock_mhz: int | None = Field(default=None, description="memory clock when measured")
    torch: str = Field(description="torch version")
    cuda: str | None = Field(default=None, description="CUDA version torch was built with")
    triton: str | None = Field(default=None, description="triton version")
    python: str = Field(description="python version")
    hostname: str = Field(description="host")
    code_version: str = Field(description="git commit of kernelflow, or 'unknown'")
    tf32: bool = Field(description="TF32 allowed for fp32 matmuls (cuBLAS) during the measurement; in records "
                       "without tf32_conv: for matmuls or convolutions")
    tf32_conv: bool | None = Field(default=None, description="TF32 allowed for fp32 convolutions (cuDNN) during the "
                                   "measurement; None: not recorded (then both flags were set as one, see tf32)")


POWER_LIMITED_SHARE = 0.5  # Timing.power_capped_share at or above which a contender counts as power-limited


class Timing(Contract):
    """One contender on one workload: median and 95% interval (a row of timings or baselines)."""

    problem_id: str
    candidate_id: str | None = Field(description="candidate id; None for a baseline")
    benchmark_for: str = Field(description="candidate id of the benchmark call that timed this row, interleaved "
                               "with the others of that call ('baseline' for a baseline-only call)")
    contender: Contender
    workload: str
    median_us: float = Field(description="median time per call, microseconds")
    ci_low_us: float = Field(description="95% CI of the median, low end (order statistics)")
    ci_high_us: float = Field(description="95% CI of the median, high end")
    min_us: float
    mean_us: float
    n_reps: int = Field(description="timed calls")
    host_us: float | None = Field(default=None, description="host time per call issued back to back (CUDA: 20 "
                                  "calls after one sync; None on a CPU, where median_us is host time): above "
                                  "median_us the call is launch-bound, and back to back it runs at this speed, not "
                                  "at median_us")
    lead_calls: int = Field(default=0, description="untimed calls of the same contender queued before each timed "
                            "call, so that it meets the clocks of sustained load (stages/measure/timing.py SUSTAIN_US; SETTLE_US "
                            "where the power cap is on); 0: none (a CPU, or a record made without a lead-in)")
    timed_sm_clock_mhz: float | None = Field(default=None, description="median SM clock read through NVML right "
                                             "after each timed call; None where not read (a CPU, no NVML)")
    power_capped_share: float | None = Field(default=None, description="share of timed calls after which NVML "
                                             "reported the software power cap (the SM clock lowered to hold the "
                                             "board's power limit): near 1, the time is the power-limited one")
    l2_flushed: bool = Field(description="L2 flushed before every timed call")
    input_sets: int = Field(description="rotated input sets")
    provenance: Provenance


class BenchmarkResult(StageResult):
    device: Device
    sizes: SizeSet
    timings: list[Timing] = Field(default_factory=list, description="one per contender and workload")
    speedup_vs_eager: float | None = Field(default=None, description="geomean over workloads of eager / candidate")
    speedup_vs_compile: float | None = Field(default=None, description="geomean of torch.compile / candidate")
    workloads: list[str] | None = Field(default=None, description="the workloads timed when the request named some "
                                        "(a screening call, whose geomean is over those only); None: all of `sizes`")
    recheck_passed: bool | None = Field(default=None, description="outputs of timed calls re-checked and correct")
    precheck_s: float | None = Field(default=None, description="seconds of the request's precheck (verification "
                                     "before timing), part of duration_s; None when it asked for none")
    accepted: bool | None = Field(default=None, description="set by the search, not the stage, on a successful call "
                                  "it judged: True when its strategy keeps the candidate on this timing, so the row "
                                  "competes for the run's winner (artifacts/winner.py): greedy, mcts and agents every "
                                  "full timing, the ladder the one it accepted at rung 2 or 3; None: not judged (a "
                                  "screening call, a failure, the baselines alone, `kernelflow bench`)")


class RungRecord(Contract):
    """A row of the rungs table: one candidate at one rung of the multi-fidelity ladder (flows/search/ladder.py)."""

    candidate_id: str = Field(description="the candidate")
    problem_id: str = Field(description="the problem")
    rung: int = Field(ge=0, le=3, description="0 policy gate (compile, one small shape, 1 trial), 1 cheap timing "
                      "(every timed shape, few repetitions, eager only), 2 verification on every shape and standard timing, "
                      "3 precise timing (tight interval) against the incumbent")
    outcome: Literal["passed", "rejected", "pruned", "accepted", "kept"] = Field(
        description="passed: promoted to the next rung; rejected: a stage failed it; pruned: cannot beat the "
        "incumbent beyond the noise band; accepted: the new best; kept: correct, but the incumbent stays")
    reason: str = Field(description="why, with the numbers")
    speedup_vs_eager: float | None = Field(default=None, description="this rung's geomean speedup over eager on "
                                           "the shapes it timed; None when the rung timed nothing")
    device_s: float = Field(description="device seconds of this rung's verify and benchmark calls (on a CPU run, "
                            "their CPU seconds); compiles run off the device and are not counted")


class Failure(Contract):
    """Why a candidate failed, as the proposer that repairs it sees it."""

    stage: Literal["compile", "verify", "benchmark"] = Field(description="the stage that rejected it")
    kind: FailureKind = Field(description="the stage's failure kind")
    message: str = Field(description="the evidence: compiler log tail, mismatch statistics, runtime error")


class LLMCall(Contract):
    """One chat-completion call (a row of the llm_calls table); the API key never appears here."""

    call_id: str = Field(description="uuid hex")
    purpose: str = Field(description="init, debug_diagnose, debug_patch or optimize")
    model: str = Field(description="the model asked")
    status: Literal["ok", "failed"] = Field(description="ok, or failed with error_kind")
    error_kind: str | None = Field(default=None, description="auth, invalid_request, rate_limited, server_error, "
                                   "timeout, connection or budget; None when ok")
    attempts: int = Field(default=0, description="HTTP attempts made, retries included")
    tokens_in: int | None = Field(default=None, description="prompt tokens the server reported")
    tokens_out: int | None = Field(default=None, description="completion tokens the server reported")
    latency_s: float = Field(default=0.0, description="wall time of the call, retries and waits included")
    cost_usd: float | None = Field(default=None, description="estimate from the configured prices")
    finish_reason: str | None = Field(default=None, description="the server's finish_reason (length: truncated)")
    started_at: str = Field(default="", description="UTC ISO time")
    message: str = Field(default="", description="short error or outcome text")


class Incumbent(Contract):
    """The run's best verified candidate when a proposal is asked for: the kernel to beat."""

    candidate: Candidate
    device: Device = Field(description="where it was timed (CPU times say nothing of GPU speed)")
    speedup_vs_eager: float = Field(description="geomean over the timed workloads")
    medians_us: dict[str, dict[str, float]] = Field(default_factory=dict, description="per timed workload, per "
                                                    "contender (candidate, eager, compile, ...): median time per "
                                                    "call, microseconds")
    feedback: str = Field(default="", description="its profile's feedback text; empty when it was not profiled")


class GenerateRequest(Contract):
    problem: Problem
    n: int = Field(ge=1, description="how many new candidates to propose")
    proposer: str = Field(default="builtin", description="registry name")
    backend: Backend | None = Field(default=None, description="restrict to one backend")
    device: Device | None = Field(default=None, description="the device candidates are generated for (the run's); "
                                  "None: cuda where a GPU is visible, else cpu")
    families: list[str] | None = Field(default=None, min_length=1, description="the template families the builtin "
                                       "proposer may use (stages/templates/); None: every family")
    parent: Candidate | None = Field(default=None, description="candidate to refine (or repair), if any")
    parent_failure: Failure | None = Field(default=None, description="set when the parent failed: repair it")
    actions: list[Action] = Field(default_factory=list, description="the parent's profile feedback, causes first: "
                                  "what the micro-profiling tools suggest changing (stages/proposers/mutations.py)")
    feedback: str = Field(default="", description="the parent's profile feedback as text (refine's Feedback.text)")
    parent_speedup_vs_eager: float | None = Field(default=None, description="the parent's measured speedup")
    incumbent: Incumbent | None = Field(default=None, description="the run's best verified candidate so far (a "
                                        "template's or a model's): what a proposal has to beat")
    lessons: list[str] = Field(default_factory=list, description="search memory: verified conclusions so far")
    exclude_ids: list[str] = Field(default_factory=list, description="candidate ids already tried")
    seed: int = 0
    model: str | None = Field(default=None, description="LLM model name (llm proposer); None: from the environment")
    llm_tokens_left: int | None = Field(default=None, description="the run's LLM token budget left; None: no limit")
    llm_usd_left: float | None = Field(default=None, description="the run's LLM dollar budget left; None: no limit")
    api_key: SecretStr | None = Field(default=None, exclude=True, description="the LLM endpoint's key as the flow "
                                      "resolved it (flows/secrets.py); never serialized, stored or logged")


class GenerateResult(Contract):
    problem_id: str
    proposer: str
    candidates: list[Candidate]
    message: str = Field(default="", description="why fewer than n, when so")
    llm_calls: list[LLMCall] = Field(default_factory=list, description="the LLM calls this proposal made")


class Proposal(Contract):
    """One turn of a round in progress (flows/search/protocol.py round_): generated and charged, its candidates not
    all evaluated yet. Saved with the search state, so a resumed run evaluates them for whoever asked, not asks
    again (the LLM calls are paid; the candidates exist nowhere else until evaluated)."""

    who: str = Field(description="who asked: the strategy's name for it (an agent)")
    lessons: list[str] = Field(default_factory=list, description="its request's lessons: the run's while its "
                               "candidates are evaluated")
    proposed: GenerateResult = Field(description="what its generate call returned")
    left: list[str] = Field(default_factory=list, description="ids of its candidates still to evaluate, in order; "
                            "one an earlier turn of the round proposed too is that turn's, not here")


class SearchSnapshot(Contract):
    """The search's state after one evaluation, or before a round's first (a row of the search_state table): what a
    resumed run restores (flows/resume.py)."""

    strategy: str = Field(description="the strategy's registry name")
    n_tried: int = Field(description="candidates tried when it was written")
    state_json: str = Field(default="{}", description="the strategy's state() as JSON; {} for a stateless one")
    lessons: list[str] = Field(default_factory=list, description="the run's search memory at that point")
    round: list[Proposal] = Field(default_factory=list, description="the round in progress (a Rounds strategy's): "
                                  "its turns not yet evaluated, in order; empty between rounds")
    updated_at: str = Field(description="UTC ISO time")


class Coverage(Contract):
    """Which template families of the builtin proposer match a problem, and why each other one does not
    (stages/proposers/coverage.py)."""

    matched: list[str] = Field(default_factory=list, description="the families that match, in registry order")
    refused: dict[str, str] = Field(default_factory=dict, description="per family that does not match: its reason "
                                    "(the tracer's, for every family, when the reference cannot be traced)")


class RunRecord(Contract):
    """One optimize run; appended when it starts and when it ends (the latest row per run wins)."""

    problem_id: str
    status: Literal["running", "finished", "failed"]
    stop_reason: str = Field(default="", description="why the loop stopped (budget, wall time, exhausted, ...)")
    started_at: str = Field(description="UTC ISO time")
    updated_at: str = Field(description="UTC ISO time of this row")
    device: Device
    sizes: SizeSet = Field(description="workload set timed")
    budget_candidates: int
    proposer: str
    n_candidates: int = 0
    n_verified: int = 0
    best_candidate_id: str | None = None
    best_speedup_vs_eager: float | None = None
    best_speedup_vs_compile: float | None = None
    winner: str | None = Field(default=None, description="the result under the seeds rule: the best candidate's id "
                               "when it beats every baseline, else 'eager' or 'compile' (artifacts/winner.py)")
    winner_speedup_vs_eager: float | None = None
    winner_note: str = Field(default="", description="one line: who won and by how much, or why a baseline did")
    code_version: str
    prefect_flow_run_id: str | None = Field(default=None, description="the Prefect flow run, for the UI")
    coverage: Coverage = Field(default_factory=Coverage, description="the builtin proposer's template families on "
                               "this problem under the run's policy, whatever the run's proposer")


# ---- profiling and semantic feedback ----

Bound = Literal["compute", "memory", "latency", "mixed"]


class ProfileRequest(StageRequest):
    problem: Problem
    candidate: Candidate | None = Field(default=None, description="the candidate; None when a baseline is profiled")
    contender: Contender = Field(default="candidate", description="what runs: the candidate, or a baseline: the "
                                 "reference in eager mode or under torch.compile (inductor, default mode)")
    device: Device = "cuda"
    workload: str | None = Field(default=None, description="GPU workload to profile; None: the first")
    energy_calls: int = Field(default=50, ge=1, description="calls in the timed loop the energy counter spans")

    @model_validator(mode="after")
    def _one_contender(self) -> ProfileRequest:
        if (self.contender == "candidate") != (self.candidate is not None):
            raise ValueError("give a candidate exactly when contender is 'candidate'")
        return self

    @property
    def subject_id(self) -> str:
        """The candidate's id, or the baseline's name."""
        return self.candidate.id if self.candidate is not None else self.contender


class KernelProfile(Contract):
    """One kernel as Nsight Compute measured it (metrics keep ncu's names and base units)."""

    kernel: str = Field(description="kernel name as ncu reports it (demangled)")
    invocations: int = Field(description="launches of this kernel in one forward call")
    duration_us: float | None = Field(default=None, description="gpu__time_duration.sum per launch, microseconds")
    metrics: dict[str, float | None] = Field(default_factory=dict, description="ncu metric name -> value")


class ProfileResult(StageResult):
    """A row of the profiles table. For a baseline, candidate_id is the contender's name ("eager", "compile")."""

    contender: Contender = Field(default="candidate", description="the candidate, or the baseline profiled")
    device: Device
    workload: str = Field(description="workload profiled")
    counters: Literal["ncu", "unavailable"] = Field(description="whether hardware counters were read")
    counters_reason: str = Field(default="", description="why counters are unavailable, when they are")
    ncu_version: str | None = None
    kernels: list[KernelProfile] = Field(default_factory=list)
    time_us: float | None = Field(default=None, description="median time per forward call (events, L2 flushed)")
    energy_j_per_call: float | None = Field(default=None, description="NVML total-energy delta / calls")
    flops: float | None = Field(default=None, description="counted work of the workload (stages/measure/roofline.py)")
    bytes_min: float | None = Field(default=None, description="fewest bytes the workload must move")
    achieved_flops_per_s: float | None = None
    achieved_bytes_per_s: float | None = Field(default=None, description="bytes_min / time (a lower bound)")
    sol_floor_us: float | None = None
    sol_fraction: float | None = Field(default=None, description="sol_floor_us / time_us")
    bound: Bound | None = Field(default=None, description="bottleneck class")
    bound_source: Literal["counters", "analytic"] | None = Field(default=None, description="what decided bound")


ActionKind = Literal[
    "vectorize_access",  # wider, coalesced global loads/stores
    "raise_occupancy",  # fewer registers or less shared memory per block, other block size
    "remove_spills",  # cut register pressure: smaller tiles, fewer live values
    "use_tensor_cores",  # tl.dot / mma / wgmma for matmul-like work
    "feed_tensor_cores",  # tensor cores in use but idle between MMAs: bigger tiles, deeper pipeline, TMA
    "pad_shared_memory",  # remove shared-memory bank conflicts (padding, swizzle)
    "reduce_divergence",  # uniform control flow per warp
    "hide_memory_latency",  # more loads in flight: pipelining stages, more warps, prefetch
    "more_parallelism",  # more blocks / split the work (split-K, split rows) / fix the tail wave
    "fuse_kernels",  # fewer launches: fuse producer/consumer kernels
    "reduce_dram_traffic",  # read each byte once: fuse passes, keep rows resident, reuse tiles
    "increase_ilp",  # more independent work per thread (unroll, multiple accumulators)
    "cheaper_instructions",  # fast-math intrinsics, fewer special-function ops, lower-energy instruction mix
    "raise_precision",  # not from a tool: verify found the output off the tolerance; round less (e.g. split operands)
]


class Action(Contract):
    """A structured change the builtin proposer can apply (parameters are hints, e.g. {"num_warps": 8})."""

    kind: ActionKind
    params: dict[str, Any] = Field(default_factory=dict, description="suggested parameter changes")


class Finding(Contract):
    """What one micro-profiling tool concluded about one kernel."""

    tool: str = Field(description="registry name of the tool")
    kernel: str | None = Field(default=None, description="kernel it concerns; None for the whole call")
    severity: float = Field(ge=0, le=1, description="estimated share of the time this could recover (0..1)")
    diagnosis: str = Field(description="what the numbers say, in plain words, with the numbers")
    recommendation: str = Field(description="what to change, in plain words")
    action: Action
    evidence: dict[str, float | int | str | None] = Field(default_factory=dict, description="the numbers used")
    explained_by: str | None = Field(default=None, description="tool whose finding on the same kernel likely "
                                     "causes this one (fix that first); None: a cause in its own right")
    not_own: bool = Field(default=False, description="the kernel is not one the candidate compiled (a vendor "
                          "library's, e.g. cuBLAS): context, not an action on the candidate's code")


class Feedback(Contract):
    """A row of the feedback table: the findings for one profiled candidate, and their text for prompts."""

    problem_id: str
    candidate_id: str = Field(description="the candidate; for a baseline its name (\"eager\", \"compile\")")
    contender: Contender = Field(default="candidate", description="the candidate, or the baseline profiled")
    bound: Bound | None
    tools_run: list[str] = Field(description="tools the bottleneck class selected")
    findings: list[Finding] = Field(default_factory=list, description="triggered findings, most severe first")
    text: str = Field(description="the findings as prompt-ready plain text")
