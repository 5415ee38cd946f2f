"""The builtin proposer: every variant it proposes matches the reference on the CPU workloads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import triton

from kernelflow.stages import generate
from kernelflow.stages.contracts import Candidate, CompileRequest, GenerateRequest, Origin, Problem
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.harness.candidate import load_model_class
from kernelflow.stages.problems.kernelbench import import_problem, load_problem, workload_call
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import trace
from kernelflow.stages.templates.program import TemplateMismatch

PROBLEMS = sorted(Path(__file__).resolve().parents[3].glob("problems/*.py"))
# the problems `make test-fast` sweeps (a pointwise op, a scan, a GEMM epilogue); `make test` sweeps all
FAST = {"09_silu", "19_cumsum", "27_linear_logsumexp"}
SWEEP = [pytest.param(p, id=p.stem, marks=() if p.stem in FAST else pytest.mark.slow) for p in PROBLEMS]

def assert_matches(candidate: Candidate, path: Path, workdir: Path) -> None:
    """ModelNew, with Model's weights, within rtol 1e-4 and atol 1e-4 x RMS of Model's output at every CPU workload
    (a bf16/fp16 output: within the problem's tolerance, as one rounding of a differently ordered sum is an ulp off).
    Both in eval mode, as the harness runs them (stages/harness/instantiate.py)."""
    problem, module = load_problem(path), import_problem(path)
    model_new = load_model_class(candidate, workdir, "cpu")
    for workload in problem.cpu_workloads:
        torch.manual_seed(0)
        init = workload_call(module, workload, "get_init_inputs")
        reference = module.Model(*init).eval()
        new = model_new(*init).eval()
        new.load_state_dict(reference.state_dict())
        inputs = workload_call(module, workload, "get_inputs")
        with torch.no_grad():
            ref, out = reference(*inputs), new(*inputs)
        assert out.shape == ref.shape and out.dtype == ref.dtype, (workload.name, out.shape, ref.shape)
        rtol, atol = (1e-4, 1e-4) if ref.dtype == torch.float32 else (problem.tolerance.rtol, problem.tolerance.atol)
        allowed = atol * ref.float().pow(2).mean().sqrt() + rtol * ref.float().abs()
        out, ref = out.float(), ref.float()
        assert ((out - ref).abs() <= allowed).all(), (candidate.origin.params, workload.name, (out - ref).abs().max())


@pytest.mark.parametrize("path", SWEEP)
def test_every_proposed_variant_matches_the_reference(path: Path, tmp_path: Path) -> None:
    result = generate.run(GenerateRequest(problem=load_problem(path), n=3))
    assert result.candidates, result.message  # every problem of problems/ gets a family
    for candidate in result.candidates:
        assert_matches(candidate, path, tmp_path)


LOOPED = {"num_warps": 4, "max_block_d": 8}  # every CPU row is wider than 8: every row takes the looped kernel


def rendered(stem: str, family: str, params: dict) -> tuple[Path, Problem, ModuleType, Candidate]:
    """A problem's path, Problem, module and its `family` candidate with `params`."""
    path = next(p for p in PROBLEMS if p.stem == stem)
    problem, module = load_problem(path), import_problem(path)
    source = TEMPLATES[family].render(TEMPLATES[family].match(problem, trace(problem, module)), params)
    return path, problem, module, Candidate.make(stem, "triton", source, Origin(kind="builtin", proposer=family,
                                                                                params=params))


def looped(stem: str, params: dict | None = None) -> tuple[Path, Problem, ModuleType, Candidate]:
    """A problem's path, Problem, module and its rowwise candidate with `params` (default LOOPED)."""
    return rendered(stem, "rowwise", params or LOOPED)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["01_softmax", "03_layernorm", "06_row_mean", "14_residual_layernorm", "15_add_rmsnorm",
                                  "18_scaled_bias_softmax"])
def test_looped_rowwise_kernel_matches_the_reference(stem: str, tmp_path: Path) -> None:
    path, problem, module, candidate = looped(stem)
    for w in problem.cpu_workloads:
        assert max(x.shape[-1] for x in workload_call(module, w, "get_inputs", path, meta=True)) > 8, w.name
    assert_matches(candidate, path, tmp_path)


@pytest.mark.parametrize("stem", ["03_layernorm", "18_scaled_bias_softmax"])
def test_looped_kernel_takes_its_own_chunk_and_warps(stem: str, tmp_path: Path) -> None:
    """loop_block_d and loop_warps set the looped kernel's launch apart from the resident kernel's cap: rows of
    96-333 wider than max_block_d 64 walk in 16-wide chunks (ragged last chunks, Welford lane counts that differ)."""
    path, _, _, candidate = looped(stem, {"num_warps": 4, "max_block_d": 64, "loop_block_d": 16, "loop_warps": 1})
    assert "_kf_launch(_kf_row_looped, (rows,), " in candidate.source and "BLOCK_D=16, num_warps=1)" in candidate.source
    assert_matches(candidate, path, tmp_path)


_INF = float("inf")
SPECIAL_ROWS = [lambda r: r[:8].fill_(-_INF),  # the first chunk: every lane's maximum starts at -inf
                lambda r: r[::8].fill_(-_INF),  # lane 0 is -inf in every chunk
                lambda r: r[:-1].fill_(-_INF),  # one finite entry, in the last (ragged) chunk
                lambda r: r.copy_(torch.arange(len(r)) * 20.0),  # a lane's max grows 160 a chunk: old sums underflow
                lambda r: r.fill_(-_INF),  # torch: NaN
                lambda r: r[len(r) // 2].fill_(_INF),  # torch: NaN
                lambda r: r[len(r) // 3].fill_(float("nan"))]  # torch: NaN


def _special_rows(t: torch.Tensor, first: int) -> torch.Tensor:
    """t with SPECIAL_ROWS[first:] applied to its rows (of 8-wide chunks) in turn."""
    rows = t.clone().reshape(-1, t.shape[-1])
    for row, special in zip(rows, SPECIAL_ROWS[first:], strict=False):
        special(row)
    return rows.reshape(t.shape)


@pytest.mark.parametrize("stem", ["05_gelu_tanh", "17_elementwise_chain"])
def test_elementwise_full_blocks_unmasked_and_a_masked_tail(stem: str, tmp_path: Path) -> None:
    """Counts that BLOCK does not divide (the CPU shapes' 1651 and 1111 at BLOCK 128) take both launches: full blocks
    with EVEN (no bounds mask, so Triton may vectorize: 05 gpu1, 8191 x 32771, 558 -> 506 us on the H200) and the
    tail masked; a per-column operand (17) is read modulo its size in both."""
    path, problem, module, candidate = rendered(stem, "elementwise", {"BLOCK": 128, "num_warps": 4})
    assert "EVEN=True" in candidate.source and "EVEN=False" in candidate.source
    counts = [max(t.numel() for t in workload_call(module, w, "get_inputs", path, meta=True))
              for w in problem.cpu_workloads]
    assert any(n > 128 and n % 128 for n in counts), counts
    assert_matches(candidate, path, tmp_path)


PTX_V4_LOADS = """
import importlib.util, json, re, sys
import triton
from triton.backends.compiler import GPUTarget
spec = importlib.util.spec_from_file_location("kf_even", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
signature = {"p0": "*fp32", "out": "*fp32", "n": "i32", "start": "i32", "BLOCK": "constexpr", "EVEN": "constexpr"}
aligned = {(0,): [["tt.divisibility", 16]], (1,): [["tt.divisibility", 16]], (3,): [["tt.divisibility", 16]]}
loads = {}
for even in (False, True):
    ast = triton.compiler.ASTSource(fn=module._kf_elementwise, signature=signature,
                                    constexprs={"BLOCK": 1024, "EVEN": even}, attrs=aligned)
    ptx = triton.compile(ast, target=GPUTarget("cuda", 90, 32), options={"num_warps": 8}).asm["ptx"]
    loads[str(even)] = len(re.findall(r"ld\\.global[^\\n]*\\.v4", ptx))
print(json.dumps(loads))
"""


@pytest.mark.slow
def test_elementwise_full_blocks_load_four_floats_at_once_on_sm90(tmp_path: Path) -> None:
    """Compiled for sm_90 here (Triton lowers to PTX without a GPU), with an element count Triton cannot assume
    divisible by 16 (05 gpu1's 8191 x 32771): the masked kernel loads one float at a time, the EVEN one four. In a
    process of its own without TRITON_INTERPRET: Triton's language modules, once imported for the interpreter,
    cannot compile."""
    source = rendered("05_gelu_tanh", "elementwise", {"BLOCK": 1024, "num_warps": 8})[3].source
    (tmp_path / "kf_even.py").write_text(source)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", PTX_V4_LOADS, str(tmp_path / "kf_even.py")], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"False": 0, "True": 1}, done.stdout


def test_resident_rows_up_to_32768_get_warps_enough_for_32_elements_a_thread() -> None:
    """The default variant keeps 15's 28672-wide GPU row resident on 32 warps (on the H200: 650 us, 707 on 16 warps,
    754-854 looped); rows of 8192 keep the variant's own warps (8 or 16), and the scan family has no such floor."""
    from kernelflow.stages.templates import rowwise
    from kernelflow.stages.templates.rows import resident_warps

    def warps(block_d: int, num_warps: int, per_thread: int | None = rowwise.PER_THREAD) -> int:
        return eval(resident_warps("block_d", num_warps, per_thread), {"block_d": block_d})

    assert [warps(32768, w) for w in (4, 8, 16)] == [32, 32, 32]
    assert [warps(8192, w) for w in (4, 8, 16)] == [8, 8, 16] and warps(8192, 4, None) == 4
    assert warps(1024, 16) == 4  # at least 8 elements a thread, as before
    _, problem, module, _ = looped("15_add_rmsnorm")
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, module))
    first = TEMPLATES["rowwise"].variants(plan)[0]
    assert first["max_block_d"] >= 28672 and first["loop_block_d"] == 16384
    assert resident_warps("block_d", first["num_warps"], rowwise.PER_THREAD) in TEMPLATES["rowwise"].render(plan, first)


@pytest.mark.parametrize("stem", ["01_softmax", "02_log_softmax", "18_scaled_bias_softmax", "03_layernorm",
                                  "14_residual_layernorm", "15_add_rmsnorm"])
def test_looped_kernel_walks_a_softmax_or_layernorm_row_twice(stem: str) -> None:
    """Online softmax: the sum of exp(x - max) is accumulated in the max's walk of the row; Welford: the sum of
    (x - mean)^2 in the mean's. So a looped softmax or layernorm walks it twice (reductions, output), not three times."""
    source = looped(stem)[3].source
    assert source[source.index("def _kf_row_looped"):].count("while start <") == 2


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["03_layernorm", "14_residual_layernorm"])
def test_looped_layernorm_variance_keeps_its_accuracy_far_from_zero(stem: str, tmp_path: Path) -> None:
    """Rows of 1e4 + N(0, 1) against a float64 reference: a variance from E[x^2] - mean^2 in fp32 would lose it to
    cancellation (1e8 - 1e8); the per-lane Welford sums combined about the row's mean keep the two-pass accuracy."""
    _, problem, module, candidate = looped(stem)
    model_new = load_model_class(candidate, tmp_path, "cpu")
    for workload in problem.cpu_workloads:
        init = workload_call(module, workload, "get_init_inputs")
        torch.manual_seed(0)
        reference, new = module.Model(*init), model_new(*init)
        new.load_state_dict(reference.state_dict())
        inputs = [x + 1e4 if i == 0 else x for i, x in enumerate(workload_call(module, workload, "get_inputs"))]
        with torch.no_grad():
            ref, out = reference.double()(*(x.double() for x in inputs)), new(*inputs)
        # fp32 inputs near 1e4 carry ~1e-3 of rounding (ulp 1e-3); a cancelled variance would be off by O(1)
        torch.testing.assert_close(out.double(), ref, rtol=0, atol=5e-3)


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["01_softmax", "02_log_softmax", "18_scaled_bias_softmax"])
def test_looped_softmax_matches_torch_on_infinities_and_nan(stem: str, tmp_path: Path) -> None:
    """The online max and sum match torch on rows with -inf entries, -inf lanes and a growing maximum, and give
    torch's NaNs for rows of -inf, with +inf or with NaN; every row several 8-wide chunks."""
    _, problem, module, candidate = looped(stem)
    model_new = load_model_class(candidate, tmp_path, "cpu")
    for workload in problem.cpu_workloads:
        init = workload_call(module, workload, "get_init_inputs")
        reference, new = module.Model(*init), model_new(*init)
        torch.manual_seed(0)
        *head, last = workload_call(module, workload, "get_inputs")
        assert last.shape[-1] > LOOPED["max_block_d"], workload.name
        for first in range(0, len(SPECIAL_ROWS), last.numel() // last.shape[-1]):
            inputs = [*head, _special_rows(last, first)]
            with torch.no_grad():
                ref, out = reference(*inputs), new(*inputs)
            rms = ref[ref.isfinite()].pow(2).mean().sqrt().nan_to_num().item()  # (0 where every row is NaN)
            torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4 * rms, equal_nan=True)


@pytest.mark.parametrize("stem", ["01_softmax", "02_log_softmax", "03_layernorm", "06_row_mean", "07_row_max",
                                  "15_add_rmsnorm", "18_scaled_bias_softmax"])
def test_multi_row_rowwise_kernel_matches_the_reference(stem: str, tmp_path: Path) -> None:
    """Every CPU row is narrower than min_tile: several rows per program, the last program's extra rows masked."""
    path = next(p for p in PROBLEMS if p.stem == stem)
    problem, module = load_problem(path), import_problem(path)
    params = {"num_warps": 4, "max_block_d": 16384, "min_tile": 4096}
    source = TEMPLATES["rowwise"].render(TEMPLATES["rowwise"].match(problem, trace(problem, module)), params)
    assert "_kf_launch(_kf_rows_resident, " in source
    for w in problem.cpu_workloads:
        x = max(workload_call(module, w, "get_inputs", path, meta=True), key=lambda t: t.numel())
        rows, per = x.numel() // x.shape[-1], 4096 // triton.next_power_of_2(x.shape[-1])
        assert per > 1 and rows % per, (w.name, rows, per)  # several rows per program, a ragged last one
    assert_matches(Candidate.make(stem, "triton", source, Origin(kind="builtin", proposer="rowwise", params=params)),
                   path, tmp_path)


@pytest.mark.parametrize("stem", ["06_row_mean", "07_row_max", "32_logsumexp"])
def test_split_row_kernels_match_the_reference(stem: str, tmp_path: Path) -> None:
    """Few rows longer than max_block_d: column chunks reduced into partials, then combined per row (logsumexp's
    sum of exp(x - shift) rescaled from each chunk's shift to the row's)."""
    path = next(p for p in PROBLEMS if p.stem == stem)
    problem, module = load_problem(path), import_problem(path)
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, module))
    assert any("split_below" in p for p in TEMPLATES["rowwise"].variants(plan))
    params = {"num_warps": 4, "max_block_d": 8, "split_below": 256}
    source = TEMPLATES["rowwise"].render(plan, params)
    assert "_kf_launch(_kf_row_partial, (rows, splits), " in source and "_kf_launch(_kf_row_combine, " in source
    assert_matches(Candidate.make(stem, "triton", source, Origin(kind="builtin", proposer="rowwise", params=params)),
                   path, tmp_path)


def test_split_logsumexp_keeps_torchs_infinities_and_nans(tmp_path: Path) -> None:
    """Rows whose chunks hold +inf, -inf only, a NaN, or huge values: torch.logsumexp's shift (0 where the max is
    infinite) makes a +inf row +inf and an all -inf row -inf; the chunks' rescaling must not turn them, or a row far
    below 0, into NaN."""
    path = next(p for p in PROBLEMS if p.stem == "32_logsumexp")
    problem, module = load_problem(path), import_problem(path)
    params = {"num_warps": 4, "max_block_d": 8, "split_below": 256}
    source = TEMPLATES["rowwise"].render(TEMPLATES["rowwise"].match(problem, trace(problem, module)), params)
    model = load_model_class(Candidate.make(path.stem, "triton", source, Origin(kind="builtin", proposer="rowwise",
                                                                                params=params)), tmp_path, "cpu")()
    torch.manual_seed(0)
    x = torch.randn(6, 50)
    x[0, 3] = float("inf")
    x[1] = float("-inf")
    x[2, :17] = float("-inf")
    x[3, 40] = float("nan")
    x[4] *= 1e4
    x[5] = -1e4 * x[5].abs()  # a shift far below 0: a padded partial's exp(0 - shift) overflows, times 0
    x[5, 45] = float("-inf")
    with torch.no_grad():
        torch.testing.assert_close(model(x), torch.logsumexp(x, dim=-1), rtol=1e-5, atol=1e-5, equal_nan=True)


def test_split_rows_only_where_partials_combine() -> None:
    path = next(p for p in PROBLEMS if p.stem == "01_softmax")  # a second-level reduction and an elem output
    problem = load_problem(path)
    plan = TEMPLATES["rowwise"].match(problem, trace(problem, import_problem(path)))
    assert not any("split_below" in p for p in TEMPLATES["rowwise"].variants(plan))
    with pytest.raises(TemplateMismatch, match="split rows"):
        TEMPLATES["rowwise"].render(plan, {"num_warps": 4, "max_block_d": 8, "split_below": 256})


def test_on_the_gpu_torch_compiles_code_is_proposed_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """On cuda the inductor family takes the first turn (the floor to beat), on the CPU its registry place; a parent's
    family still goes last; the request's seed still rotates."""
    from kernelflow.stages.proposers import builtin

    monkeypatch.setattr(builtin, "_ordered", lambda family, plan, req, notes: [{"i": 0}, {"i": 1}])
    plans = {family: None for family in ("elementwise", "rowwise", "inductor")}
    problem = load_problem(next(p for p in PROBLEMS if p.stem == "09_silu"))

    def order(device: str, **kw: object) -> list[str]:
        req = GenerateRequest(problem=problem, n=1, device=device, **kw)
        return [family for family, _ in builtin._turns(plans, req, [])]  # type: ignore[arg-type]

    assert order("cuda") == ["inductor", "elementwise", "rowwise"] * 2
    assert order("cpu") == ["elementwise", "rowwise", "inductor"] * 2
    assert order("cuda", seed=1) == ["elementwise", "rowwise", "inductor", "elementwise", "rowwise", "inductor"]
    parent = Candidate.make(problem.id, "triton", "x", Origin(kind="builtin", proposer="inductor", params={}))
    assert order("cuda", parent=parent) == ["elementwise", "rowwise", "inductor"] * 2


def test_unmatched_problem_gets_no_candidate_and_every_familys_reason() -> None:
    sort = Path(__file__).parents[2] / "fixtures" / "problems" / "sort.py"
    result = generate.run(GenerateRequest(problem=load_problem(sort), n=4))
    assert result.candidates == [] and "rowwise: aten.sort: a sort: no family lowers it" in result.message
    assert "scan: aten.sort: a sort" in result.message
    assert "matmul: no matmul" in result.message and "library_epilogue: no matmul" in result.message


def test_a_request_asks_only_its_families(monkeypatch: pytest.MonkeyPatch) -> None:
    """A family left out is never asked (its match would fail the test here), and says why; so does a run's
    coverage. An unknown family is an error naming the known ones, in a request and in a RunConfig."""
    from pydantic import ValidationError

    from kernelflow.flows.config import RunConfig
    from kernelflow.stages.proposers.coverage import coverage

    def asked(*_: object) -> None:
        raise AssertionError("a family the request left out was asked")

    monkeypatch.setattr(TEMPLATES["inductor"], "match", asked)
    problem = load_problem(next(p for p in PROBLEMS if p.stem == "09_silu"))
    result = generate.run(GenerateRequest(problem=problem, n=3, families=["elementwise"]))
    assert len(result.candidates) == 3 and {c.origin.proposer for c in result.candidates} == {"elementwise"}
    covered = coverage(problem, "cpu", ["elementwise", "rowwise"])
    assert covered.matched == ["elementwise"]
    assert covered.refused["inductor"] == "left out by the request (families: elementwise, rowwise)"
    assert covered.refused["rowwise"] != covered.refused["inductor"]  # asked, and refused for its own reason
    with pytest.raises(ValueError, match=r"unknown template families \['nope'\]; known: elementwise, rowwise"):
        generate.run(GenerateRequest(problem=problem, n=1, families=["nope"]))
    with pytest.raises(ValueError, match="unknown template families"):
        coverage(problem, "cpu", ["nope"])
    with pytest.raises(ValidationError, match="unknown template families"):
        RunConfig(families=["elementwise", "nope"])

def test_exclusion_seed_and_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(TEMPLATES, "inductor")  # the elementwise family's variants alone
    problem = load_problem(next(p for p in PROBLEMS if p.stem == "09_silu"))
    first = generate.run(GenerateRequest(problem=problem, n=3)).candidates
    assert [c.id for c in generate.run(GenerateRequest(problem=problem, n=3)).candidates] == [c.id for c in first]
    rest = generate.run(GenerateRequest(problem=problem, n=100, exclude_ids=[c.id for c in first])).candidates
    assert len(rest) == 8 - 3 and not {c.id for c in rest} & {c.id for c in first}
    assert generate.run(GenerateRequest(problem=problem, n=1, seed=1)).candidates[0].id != first[0].id
    child = generate.run(GenerateRequest(problem=problem, n=2, parent=first[0])).candidates
    assert all(c.parent_id == first[0].id for c in child)
    near = {"BLOCK": 1024, "num_warps": 8}, {"BLOCK": 2048, "num_warps": 4}
    assert child[0].origin.params in near and first[0].origin.params == {"BLOCK": 1024, "num_warps": 4}


@pytest.mark.parametrize("stem", ["08_matmul_fp32", "11_linear_bias_gelu", "12_matmul_scale_residual", "16_swiglu_bf16"])
def test_small_tile_matmul_kernel_matches_the_reference(stem: str, tmp_path: Path) -> None:
    path = next(p for p in PROBLEMS if p.stem == stem)
    problem = load_problem(path)
    plan = TEMPLATES["matmul"].match(problem, trace(problem, import_problem(path)))
    params = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 2, "GROUP_M": 2}
    source = TEMPLATES["matmul"].render(plan, params)  # several tiles (CPU M <= 32: one group), K steps, ragged edges
    assert_matches(Candidate.make(stem, "triton", source, Origin(kind="builtin", proposer="matmul", params=params)),
                   path, tmp_path)


BATCHED = '''
import torch
import torch.nn as nn

b, m, k, n = 3, 17, 23, 29


class Model(nn.Module):
    def __init__(self, k, n):
        super().__init__()
        self.fc = nn.Linear(k, n)

    def forward(self, x, y, r):
        {forward}


def get_inputs():
    return [{inputs}, {r}]


def get_init_inputs():
    return [k, n]


WORKLOADS = {{"gpu": [dict(b=8, m=512, k=256, n=384)], "cpu": [dict(b=3, m=17, k=23, n=29), dict(b=2, m=5, k=40, n=9)]}}
'''
PRODUCTS = {  # name: (forward, the inputs x and y)
    "bmm": ("return torch.bmm(x, y)", "torch.randn(b, m, k), torch.randn(b, k, n)"),
    "batch_times_matrix": ("return torch.matmul(x, y)", "torch.randn(b, m, k), torch.randn(k, n)"),
    "matrix_times_batch": ("return x @ y", "torch.randn(m, k), torch.randn(b, k, n)"),
    "linear_over_3d_with_residual": ("return torch.relu(self.fc(x)) + r", "torch.randn(b, m, k), torch.randn(1)"),
    "transposed_a": ("return torch.matmul(x.T, y)", "torch.randn(k, m), torch.randn(k, n)"),
    "transposed_b": ("return torch.matmul(x, y.t())", "torch.randn(m, k), torch.randn(n, k)"),
    "transposed_both_scaled": ("return torch.matmul(x.T, y.T) * 0.5", "torch.randn(k, m), torch.randn(n, k)"),
    "batched_transposed": ("return torch.bmm(x, y.transpose(1, 2))", "torch.randn(b, m, k), torch.randn(b, n, k)"),
    "einsum_4d_times_matrix": ("return torch.einsum('zbij,jk->zbik', x, y)", "torch.randn(2, b, m, k), torch.randn(k, n)"),
    "einsum_batched_transposed_b": ("return torch.einsum('bik,bjk->bij', x, y)",
                                    "torch.randn(b, m, k), torch.randn(b, n, k)"),
    "einsum_matrix_times_batch": ("return torch.einsum('ij,bjk->bik', x, y)", "torch.randn(m, k), torch.randn(b, k, n)"),
    "einsum_transposed_a": ("return torch.einsum('ki,kj->ij', x, y) + 1.0", "torch.randn(k, m), torch.randn(k, n)"),
    "linear_over_4d": ("return self.fc(x)", "torch.randn(2, b, m, k), torch.randn(1)"),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
def test_batched_and_transposed_products_match_the_reference(name: str, tmp_path: Path) -> None:
    """A batch of matrices (bmm, a 3-D operand times a matrix either way round, a Linear over a 3-D input with a
    full-shape epilogue operand) and transposed operands read through their strides: every tile, batch, K step."""
    forward, inputs = PRODUCTS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(BATCHED.format(forward=forward, inputs=inputs, r="torch.randn(b, m, n)"))
    problem = load_problem(path)
    plan = TEMPLATES["matmul"].match(problem, trace(problem, import_problem(path)))
    params = {"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 2, "GROUP_M": 2}
    source = TEMPLATES["matmul"].render(plan, params)
    assert_matches(Candidate.make(name, "triton", source, Origin(kind="builtin", proposer="matmul", params=params)),
                   path, tmp_path)


@pytest.mark.parametrize("name", ["bmm", "einsum_4d_times_matrix", "transposed_both_scaled"])
def test_batched_and_transposed_products_compile_for_sm90(name: str, tmp_path: Path) -> None:
    forward, inputs = PRODUCTS[name]
    path = tmp_path / f"{name}.py"
    path.write_text(BATCHED.format(forward=forward, inputs=inputs, r="torch.randn(b, m, n)"))
    problem = load_problem(path)
    plan = TEMPLATES["matmul"].match(problem, trace(problem, import_problem(path)))
    params = TEMPLATES["matmul"].variants(plan)[0]
    candidate = Candidate.make(name, "triton", TEMPLATES["matmul"].render(plan, params),
                               Origin(kind="builtin", proposer="matmul", params=params))
    built = run_stage("compile", CompileRequest(workdir=str(tmp_path / "compile"), candidate=candidate,
                                                problem=problem))
    assert (built.status, built.mode) == ("ok", "ahead_of_time"), built.message


@pytest.mark.parametrize("forward,inputs,r,reason", [
    ("return torch.bmm(x, y) + r", "torch.randn(b, m, k), torch.randn(b, k, n)", "torch.randn(m, n)",
     r"broadcasts over the batch"),
    ("return torch.matmul(x, y)", "torch.randn(b, m, k), torch.randn(1, k, n)", "torch.randn(1)",
     r"broadcasts batches of \[1, 3\]"),
    ("t = x.T\n        return torch.matmul(t, y) + t.sum()", "torch.randn(k, m), torch.randn(k, n)", "torch.randn(1)",
     r"used outside the product"),
    ("return torch.einsum('ij,jk,kl->il', x, y, y.T)", "torch.randn(m, k), torch.randn(k, k)", "torch.randn(1)",
     r"of 3 operands: a matrix product has two"),
    ("return torch.einsum('ij,ij->i', x, y)", "torch.randn(m, k), torch.randn(m, k)", "torch.randn(1)",
     r"is not one matrix product of the last two dims"),
    ("return torch.einsum('bij,cjk->bcik', x, y)", "torch.randn(b, m, k), torch.randn(2, k, n)", "torch.randn(1)",
     r"is not one matrix product"),
    ("return torch.matmul(x, y)", "torch.randn(2, b, m, k), torch.randn(2, b, k, n)", "torch.randn(1)",
     r"multiplies tensors of shapes \[2, 3, 17, 23\] and \[2, 3, 23, 29\]"),
])
def test_what_the_batched_product_cannot_take_is_named(forward: str, inputs: str, r: str, reason: str,
                                                        tmp_path: Path) -> None:
    path = tmp_path / "refused.py"
    path.write_text(BATCHED.format(forward=forward, inputs=inputs, r=r))
    problem = load_problem(path)
    with pytest.raises(TemplateMismatch, match=reason):
        TEMPLATES["matmul"].match(problem, trace(problem, import_problem(path)))
