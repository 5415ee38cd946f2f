"""Triton's CPU interpreter, made to run what kernelflow verifies on the CPU; `install()` once per process, before any
candidate is imported (stages/harness/candidate.py). It changes nothing for a compiled kernel.

- Under NumPy 2.4 and later a scalar kernel argument is a one-element array, and the interpreter's `int(tensor)`
  (`range`/`tl.range` bounds, `__index__`) calls int() on that array, which NumPy refuses for arrays of one
  dimension: the interpreter reads the one element instead (`.item()`), as older NumPy did.
- A reduction with a combine function (tl.reduce; Inductor's Welford and argmax-with-index reductions) runs as a
  pairwise tree along the axis, the combine called on whole arrays of pairs (lower indices on the left), log2(n)
  calls; the interpreter's own calls it once per element in Python (a row of 4096 on 64 rows: 262k calls). A tree
  is also the order a GPU combines in; Triton requires the combine to be associative."""

from __future__ import annotations

_installed = False
_interpreters_reduce = None  # the interpreter's own ReduceOps.generic_reduce, once install() has replaced it


def install() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    try:
        from triton.runtime import interpreter
    except ImportError:
        return
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None:
        return

    def patched(tensor, scope):  # type: ignore[no-untyped-def]
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interpreter._patch_lang_tensor = patched
    reduce_ops = getattr(interpreter, "ReduceOps", None)
    if reduce_ops is not None and hasattr(reduce_ops, "generic_reduce"):
        global _interpreters_reduce
        _interpreters_reduce = reduce_ops.generic_reduce
        reduce_ops.generic_reduce = _tree_reduce


def _tree_reduce(self, input):  # type: ignore[no-untyped-def]
    """ReduceOps.generic_reduce as a pairwise tree along the axis (see the module docstring); its output as the
    interpreter's: the input's dtypes, the axis dropped (kept as 1 with keep_dims), for axis=None a scalar (every
    input flattened; the interpreter's own flattens only the first of a tuple), or with keep_dims one element in
    as many dims as the input, as compiled Triton gives."""
    import numpy as np
    import triton.language as tl

    axis, shape = self.axis, input[0].handle.data.shape
    dtypes = [arg.dtype for arg in input]
    datas = [arg.handle.data.reshape(-1) if axis is None else np.moveaxis(arg.handle.data, axis, -1) for arg in input]
    while datas[0].shape[-1] > 1:  # a block's dims are powers of two: the pairs always pair up
        left = [self.to_tensor(np.ascontiguousarray(d[..., 0::2]), t) for d, t in zip(datas, dtypes, strict=True)]
        right = [self.to_tensor(np.ascontiguousarray(d[..., 1::2]), t) for d, t in zip(datas, dtypes, strict=True)]
        out = self.combine_fn.fn(*left, *right)
        out = out if isinstance(out, tuple) else (out,)
        pairs = left[0].handle.data.shape
        datas = [np.broadcast_to(o.handle.data if isinstance(o, tl.core.tensor) else o, pairs).astype(d.dtype)
                 for o, d in zip(out, datas, strict=True)]
    ret = []
    for data, dtype in zip(datas, dtypes, strict=True):
        data = data[..., 0]
        if axis is None:
            data = data.reshape((1,) * len(shape)) if self.keep_dims else data.item()
        elif self.keep_dims:
            data = np.expand_dims(data, axis)
        ret.append(self.to_tensor(data, dtype))
    return ret
