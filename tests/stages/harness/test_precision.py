"""The precision settings: PyTorch's defaults unless the policy says otherwise (cuDNN's TF32 for fp32 convolutions
on, fp32 matmuls IEEE), set by instantiate.set_precision and recorded with every timing."""

import os
from collections.abc import Iterator

import pytest
import torch

from kernelflow.stages.contracts import Policy
from kernelflow.stages.harness.instantiate import set_precision
from kernelflow.stages.measure.provenance import collect


def flags() -> tuple[bool, bool, str, str | None]:
    return (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.get_float32_matmul_precision(), os.environ.get("TRITON_F32_DEFAULT"))


@pytest.fixture(autouse=True)
def restored() -> Iterator[None]:
    matmul, cudnn, precision, triton = flags()
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn
    torch.set_float32_matmul_precision(precision)
    if triton is None:
        os.environ.pop("TRITON_F32_DEFAULT", None)
    else:
        os.environ["TRITON_F32_DEFAULT"] = triton


def test_the_default_policy_is_pytorchs_default_conv_tf32_on_matmul_tf32_off():
    assert (Policy().conv_tf32, Policy().allow_tf32) == (True, False)
    set_precision(Policy())
    assert flags() == (False, True, "highest", "ieee")


def test_allow_tf32_turns_both_on_and_conv_tf32_false_turns_cudnns_off():
    set_precision(Policy(allow_tf32=True, conv_tf32=False))
    assert flags() == (True, True, "high", "tf32")
    set_precision(Policy(conv_tf32=False))
    assert flags() == (False, False, "highest", "ieee")


def test_provenance_records_each_flag():
    set_precision(Policy())
    assert (collect("cpu").tf32, collect("cpu").tf32_conv) == (False, True)
    set_precision(Policy(conv_tf32=False))
    assert (collect("cpu").tf32, collect("cpu").tf32_conv) == (False, False)
