"""The interpreter's reductions with a combine function run as a pairwise tree (stages/harness/interpreter_compat.py):
the same values as its own element-by-element fold, and torch's, for Inductor's kinds of combine (argmax with the
first index on ties, Welford, online max/sum-exp), along either axis, with keep_dims, and over the whole block."""

import pytest
import torch
import triton
import triton.language as tl

from kernelflow.stages.harness import interpreter_compat

interpreter_compat.install()
from triton.runtime import interpreter  # noqa: E402

pytestmark = pytest.mark.skipif(interpreter_compat._interpreters_reduce is None,
                                reason="this Triton's interpreter has no ReduceOps.generic_reduce to replace")


@triton.jit
def _argmax(a, ia, b, ib):
    take_b = (b > a) | ((b == a) & (ib < ia))
    return tl.where(take_b, b, a), tl.where(take_b, ib, ia)


@triton.jit
def _welford(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    w = tl.where(n == 0.0, 0.0, n_b / n)
    return mean_a + delta * w, m2_a + m2_b + delta * delta * n_a * w, n


@triton.jit
def _online(m_a, s_a, m_b, s_b):
    m = tl.maximum(m_a, m_b)  # a side whose max is -inf adds nothing (as Inductor's online_softmax_combine)
    inf = float("-inf")
    return m, tl.where(m_a == inf, 0.0, s_a * tl.exp(m_a - m)) + tl.where(m_b == inf, 0.0, s_b * tl.exp(m_b - m))


@triton.jit
def _kernel(x, out_i, out_m, out_v, out_l, R: tl.constexpr, C: tl.constexpr, AXIS: tl.constexpr, KEEP: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    v = tl.load(x + r * C + c)
    zero = tl.zeros([R, C], dtype=tl.float32)
    if AXIS == 1:
        idx = c + r * 0
        o = r if KEEP else tl.arange(0, R)
    else:
        idx = r + c * 0
        o = c if KEEP else tl.arange(0, C)
    _, at = tl.reduce((v, idx), AXIS, _argmax, keep_dims=KEEP)
    mean, m2, n = tl.reduce((v, zero, zero + 1.0), AXIS, _welford, keep_dims=KEEP)
    m, s = tl.reduce((v, zero + 1.0), AXIS, _online, keep_dims=KEEP)
    tl.store(out_i + o, at)
    tl.store(out_m + o, mean)
    tl.store(out_v + o, m2 / n)
    tl.store(out_l + o, m + tl.log(s))


@triton.jit
def _whole(x, out_i, out_m, R: tl.constexpr, C: tl.constexpr):
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    v = tl.load(x + r * C + c)
    zero = tl.zeros([R, C], dtype=tl.float32)
    _, at = tl.reduce((v, r * C + c), None, _argmax)
    mean, _, _ = tl.reduce((v, zero, zero + 1.0), None, _welford, keep_dims=True)
    tl.store(out_i, at)
    tl.static_assert(len(mean.shape) == 2)  # one element in as many dims as the block
    tl.store(out_m + r * 0 + c * 0, mean)


def rows() -> torch.Tensor:
    torch.manual_seed(0)
    x = torch.randn(8, 16)
    x[1, 3] = x[1, 9] = x[1].max() + 1  # a tie along a row: the first index wins
    x[6, 2] = x[0, 2] = x[:, 2].max() + 1  # and along a column
    x[2, 5:] = float("-inf")
    return x


@pytest.mark.parametrize("axis", [1, 0])
@pytest.mark.parametrize("keep", [False, True])
def test_the_tree_gives_the_folds_values_and_torchs(axis: int, keep: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    x = rows()

    def run() -> list[torch.Tensor]:
        n = x.shape[0] if axis == 1 else x.shape[1]
        outs = [torch.empty(n, dtype=torch.int32), torch.empty(n), torch.empty(n), torch.empty(n)]
        _kernel[(1,)](x, *outs, R=x.shape[0], C=x.shape[1], AXIS=axis, KEEP=keep)
        return outs

    tree = run()
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", interpreter_compat._interpreters_reduce)
    fold = run()
    assert torch.equal(tree[0], fold[0])
    for a, b in zip(tree[1:], fold[1:], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True)
    assert torch.equal(tree[0].long(), x.argmax(axis))
    torch.testing.assert_close(tree[3], x.logsumexp(axis))
    mean = x.mean(axis)
    finite = torch.isfinite(mean)  # Welford of -inf values is NaN, torch's mean -inf
    assert finite.sum() >= 4
    torch.testing.assert_close(tree[1][finite], mean[finite])


def test_a_whole_block_reduces_to_one_value_with_or_without_its_dims() -> None:
    x = torch.randn(8, 16)
    x[5, 7] = x[2, 1] = x.max() + 1
    at, mean = torch.empty(1, dtype=torch.int32), torch.empty(1)
    _whole[(1,)](x, at, mean, R=8, C=16)
    assert at.item() == 2 * 16 + 1
    assert mean.item() == pytest.approx(x.mean().item(), abs=1e-5)
