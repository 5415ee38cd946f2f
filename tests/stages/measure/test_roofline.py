"""Analytic roofline: hand-counted FLOPs and bytes, the floor's larger term, classes, SOL score, our suite."""

import math
from pathlib import Path

import pytest

from kernelflow.stages.contracts import Policy
from kernelflow.stages.measure.ceilings import peaks_for
from kernelflow.stages.measure.peaks import KNOWN_PEAKS
from kernelflow.stages.measure.roofline import (
    Work,
    analytic_bound,
    count_work,
    sol_floor_us,
    sol_fraction,
    sol_score,
)
from kernelflow.stages.problems.kernelbench import load_problem

ROOT = Path(__file__).resolve().parents[3]
H200 = KNOWN_PEAKS["NVIDIA H200"]

MATMUL = '''
import torch
import torch.nn as nn
M, K, N = 3, 5, 7
DTYPE = {dtype}
class Model(nn.Module):
    def forward(self, a, b):
        return a @ b
def get_inputs():
    return [torch.randn(M, K, dtype=DTYPE), torch.randn(K, N, dtype=DTYPE)]
def get_init_inputs():
    return []
WORKLOADS = {{"gpu": [dict(M=8192, K=8192, N=8192)], "cpu": [dict(M=3, K=5, N=7)]}}
'''

ELEMENTWISE = '''
import torch
import torch.nn as nn
n = 10
class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(n))
    def forward(self, x):
        return torch.relu(x * self.scale + 1.0)
def get_inputs():
    return [torch.randn(4, n)]
def get_init_inputs():
    return [n]
WORKLOADS = {"gpu": [dict(n=10)]}
'''

CONV = '''
import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3, padding=1, bias=True)
    def forward(self, x):
        return self.conv(x)
def get_inputs():
    return [torch.randn(2, 3, 8, 8)]
def get_init_inputs():
    return []
'''

SOFTMAX = '''
import torch
import torch.nn as nn
rows, dim = 32768, 8192
class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)
def get_inputs():
    return [torch.randn(rows, dim)]
def get_init_inputs():
    return []
WORKLOADS = {"gpu": [dict(rows=32768, dim=8192)], "cpu": [dict(rows=3, dim=5)]}
'''


def work_of(tmp_path: Path, source: str, name: str, sizes: str = "cpu") -> Work:
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    problem = load_problem(path)
    return count_work(problem, (problem.workloads(sizes) or problem.gpu_workloads)[0])  # no WORKLOADS: gpu0 only


def test_matmul_flops_and_bytes_are_exact(tmp_path):
    work = work_of(tmp_path, MATMUL.format(dtype="torch.float32"), "mm")
    assert (work.matmul_flops, work.flops, work.bytes_min) == (2 * 3 * 5 * 7, 210.0, (15 + 35 + 21) * 4)
    assert not work.tensor_core_eligible


def test_elementwise_counts_each_pointwise_op_per_element(tmp_path):
    work = work_of(tmp_path, ELEMENTWISE, "ew", "gpu")  # mul, add, relu over 4x10; x, scale, out
    assert (work.matmul_flops, work.pointwise_ops_per_element, work.flops) == (0, 3.0, 120.0)
    assert work.bytes_min == (40 + 10 + 40) * 4


def test_conv_flops_are_two_per_multiply_add_plus_bias(tmp_path):
    work = work_of(tmp_path, CONV, "conv")  # 2x5x8x8 outputs, each 3*3*3 multiply-adds, plus a bias add
    assert (work.matmul_flops, work.elements_out, work.flops) == (2 * 27 * 640, 640, 2 * 27 * 640 + 640)
    assert work.bytes_min == (2 * 3 * 64 + 640 + 5 * 3 * 9 + 5) * 4


def test_softmax_decomposes_into_five_ops_per_element(tmp_path):
    assert work_of(tmp_path, SOFTMAX, "sm").pointwise_ops_per_element == 5.0


def test_floor_is_the_larger_term():
    base = dict(problem_id="p", workload="w", matmul_flops=0, elements_out=1, pointwise_ops_per_element=0.0,
                dtype="float32", tensor_core_eligible=False)
    memory = Work(**base, flops=6.7e9, bytes_min=int(4.3e12))  # 100 us of fp32 work, 1 s of traffic
    compute = Work(**base, flops=6.7e13, bytes_min=int(4.3e6))  # 1 s of fp32 work, 1 us of traffic
    assert math.isclose(sol_floor_us(memory, H200), 1e6) and math.isclose(sol_floor_us(compute, H200), 1e6)


def test_tf32_policy_lowers_an_fp32_matmul_floor(tmp_path):
    work = work_of(tmp_path, MATMUL.format(dtype="torch.float32"), "mm32", "gpu")
    assert sol_floor_us(work, H200, Policy(allow_tf32=True)) < sol_floor_us(work, H200) / 5


def test_fp32_convolutions_count_at_the_tf32_peak_where_cudnn_may_use_it(tmp_path):
    """Policy.conv_tf32 (PyTorch's default) lets cuDNN run fp32 convolutions in TF32: the floor must bound that too;
    a candidate's own kernels still may not use TF32 (tensor_core_eligible)."""
    conv, mm = work_of(tmp_path, CONV, "conv"), work_of(tmp_path, MATMUL.format(dtype="torch.float32"), "mm")
    assert (conv.conv_flops, conv.conv_tf32, conv.tensor_core_eligible) == (conv.matmul_flops, True, False)
    assert (mm.conv_flops, mm.conv_tf32) == (0, False)
    big = conv.model_copy(update={"matmul_flops": 10**13, "conv_flops": 10**13, "flops": 10**13 + 640.0})
    ieee, tf32 = sol_floor_us(big, H200, Policy(conv_tf32=False)), sol_floor_us(big, H200)
    assert math.isclose(ieee, 1e13 / H200.fp32_flops_per_s * 1e6, rel_tol=1e-6)
    assert math.isclose(tf32, 1e13 / H200.tf32_flops_per_s * 1e6, rel_tol=1e-6)


def test_classes_memory_compute_latency(tmp_path):
    assert analytic_bound(work_of(tmp_path, SOFTMAX, "sm", "gpu"), H200) == "memory"
    bf16 = work_of(tmp_path, MATMUL.format(dtype="torch.bfloat16"), "mm16", "gpu")
    assert bf16.tensor_core_eligible and analytic_bound(bf16, H200) == "compute"
    assert math.isclose(sol_floor_us(bf16, H200), 2 * 8192**3 / 7.88e14 * 1e6)
    assert analytic_bound(work_of(tmp_path, SOFTMAX, "sm", "cpu"), H200) == "latency"
    assert analytic_bound(bf16, H200, time_us=3.0) == "latency"


def test_sol_score_and_fraction():
    assert sol_score(100.0, 300.0, 100.0) == 1.0 and sol_score(300.0, 300.0, 100.0) == 0.5
    assert sol_score(300.0, 100.0, 100.0) is None and sol_fraction(200.0, 100.0) == 0.5
    with pytest.raises(ValueError, match="below the SOL floor"):
        sol_score(50.0, 300.0, 100.0)


def test_peaks_only_for_known_gpus():
    assert peaks_for("NVIDIA H200") == H200 and peaks_for("cpu") is None


@pytest.mark.parametrize("path", sorted((ROOT / "problems").glob("*.py")), ids=lambda p: p.stem)
def test_every_suite_gpu_workload_has_a_finite_positive_floor(path: Path):
    problem = load_problem(path)
    floors = [sol_floor_us(count_work(problem, w), H200) for w in problem.gpu_workloads]
    assert all(math.isfinite(f) and f > 0 for f in floors)
