"""The library policy: verify's census lets kernels, allocation, views and copies run, cuBLAS/cuDNN only when the
policy allows it, and fails a forward that computes with torch ops (stages/harness/library_policy.py)."""

from pathlib import Path

from kernelflow.stages.contracts import Candidate, Origin, Policy, Problem, VerifyRequest, VerifyResult
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[3]
SOFTMAX = load_problem(ROOT / "problems" / "01_softmax.py")
ADD = load_problem(ROOT / "tests" / "fixtures" / "problems" / "add.py")
TRITON_ADD = (ROOT / "tests" / "fixtures" / "candidates" / "triton_add.py").read_text()

MM_RELU = '''
import torch
import torch.nn as nn

M, K, N = 256, 128, 64


class Model(nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


WORKLOADS = {"gpu": [dict(M=256, K=128, N=64)], "cpu": [dict(M=16, K=32, N=8)]}
'''

MM_THEN_TRITON_RELU = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a, b):
        product = torch.mm(a, b)  # cuBLAS for the product, a Triton kernel for the epilogue
        out = torch.empty_like(product)
        relu_kernel[(triton.cdiv(out.numel(), 1024),)](product, out, out.numel(), BLOCK=1024)
        return out
'''

TORCH_SOFTMAX = '''
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.softmax(x, -1)
'''

CUSTOM_OP_SOFTMAX = '''
import torch
import torch.nn as nn


@torch.library.custom_op("kf_test_cheat::softmax", mutates_args=())
def softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x, -1)


class ModelNew(nn.Module):
    def forward(self, x):
        return softmax(x)
'''


def verify(problem: Problem, source: str, tmp_path: Path, policy: Policy | None = None) -> VerifyResult:
    candidate = Candidate.make(problem.id, "triton" if "triton" in source else "torch", source,
                               Origin(kind="user", proposer="test"))
    request = VerifyRequest(workdir=str(tmp_path / "work"), problem=problem,
                            candidate=candidate, policy=policy, trials=2)
    return run_stage("verify", request, "inline")  # type: ignore[return-value]


def mm_relu(tmp_path: Path, policy: str = "") -> Problem:
    path = tmp_path / "mm_relu.py"
    path.write_text(MM_RELU + policy)
    return load_problem(path)


def test_torch_softmax_in_forward_is_a_policy_violation(tmp_path: Path):
    result = verify(SOFTMAX, TORCH_SOFTMAX, tmp_path)
    assert (result.status, result.failure_kind) == ("failed", "policy_violation") and "aten._softmax x1" in result.message


def test_torch_compute_passes_when_the_policy_allows_it(tmp_path: Path):
    assert verify(SOFTMAX, TORCH_SOFTMAX, tmp_path, Policy(allow_torch_compute=True)).status == "ok"


def test_a_custom_op_hiding_torch_math_is_a_policy_violation(tmp_path: Path):
    """The census cannot see inside a torch.library op, so the op itself counts as compute."""
    result = verify(SOFTMAX, CUSTOM_OP_SOFTMAX, tmp_path)
    assert result.failure_kind == "policy_violation" and "kf_test_cheat.softmax x1" in result.message


def test_triton_candidate_passes_and_its_census_is_logged(tmp_path: Path):
    result = verify(ADD, TRITON_ADD, tmp_path)
    log = (tmp_path / "work" / result.files["verify_log"]).read_text()
    assert result.status == "ok" and "cpu0: the forward dispatches" in log and "aten.empty_like x1" in log, result.message


def test_torch_ops_in_the_constructor_are_not_counted(tmp_path: Path):
    init = "        super().__init__()\n"
    source = TRITON_ADD.replace(init, init + "        self.register_buffer('t', torch.softmax(torch.randn(8), 0).cumsum(0))\n")
    assert source != TRITON_ADD and verify(ADD, source, tmp_path).status == "ok"


def test_vendor_matmul_with_triton_epilogue_passes_when_vendor_libraries_are_allowed(tmp_path: Path):
    assert verify(mm_relu(tmp_path), MM_THEN_TRITON_RELU, tmp_path).status == "ok"


def test_problem_policy_can_forbid_vendor_libraries(tmp_path: Path):
    result = verify(mm_relu(tmp_path, 'POLICY = {"allow_vendor_libraries": False}\n'), MM_THEN_TRITON_RELU, tmp_path)
    assert result.failure_kind == "policy_violation" and "aten.mm x1" in result.message and "forbids" in result.message


def test_campaign_policy_overrides_the_problems(tmp_path: Path):
    result = verify(mm_relu(tmp_path), MM_THEN_TRITON_RELU, tmp_path, Policy(allow_vendor_libraries=False))
    assert result.failure_kind == "policy_violation" and "aten.mm x1" in result.message
