"""Triton's CPU interpreter under NumPy 2.4 and later: a scalar kernel argument is a one-element array there, and
the interpreter's `int(tensor)` (used by `range`/`tl.range` bounds and `__index__`) calls int() on that array,
which NumPy 2.4 refuses for arrays of one dimension ("only 0-dimensional arrays can be converted to Python
scalars"). `install()` makes the interpreter read the one element instead (`.item()`), as older NumPy did. It
changes nothing for a compiled kernel and nothing when the interpreter already works; once per process, before
any candidate is imported (stages/harness/candidate.py)."""

from __future__ import annotations

_installed = False


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
