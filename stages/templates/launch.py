"""The launch every template's forward makes: `_kf_launch(kernel, grid, *args, **meta)`, copied into each candidate.

It does what `kernel[grid](*args, **meta)` does with less of the host's time. The JIT binds the arguments,
specializes, builds a cache key and looks the kernel up on every launch. On the H200's host that is 12.6 us warm
and 19.1 us right after a device sync, where the compiled kernel's own launcher takes 5.7 and 6.8 us (BENCHMARKS.md,
tenth session, scripts/launch_path.py). A host path longer than KernelBench's L2 flush is timed by its procedure
(issue 8 part 5). Eager's first launch is one ATen call, and a model's host time adds up launch by launch.

The first launch of each key goes through the JIT, which compiles and launches. The CompiledKernel it returns is
kept under a key at least as fine as what Triton specializes on:
- the kernel and the current device;
- each argument, positional or keyword (constexprs, and options such as num_warps): a tensor's dtype and 16-byte
  alignment, a number's type and value. Triton specializes a pointer on its dtype and alignment, an int on being 1,
  on divisibility by 16 and on its width, a constexpr on its value.
Later launches with that key call the compiled kernel's launcher directly. The launch hooks are passed on as the
JIT passes them, so a profiler's hooks still see each launch. stages/launches.py counts these launches at the same
place as the JIT's, CompiledKernel.run, so the harness's launch census and ghost replay see them.

Three cases always take the JIT: CPU and meta tensors (Triton's interpreter, and the compile stage's capture), a
torch.compile trace (dynamo traces `kernel[grid]`, not this cache), and arguments of other types than tensors,
numbers, strings and None. The grid is a
tuple of one to three ints, as the templates write it. At most CAP keys are kept; past that the cache starts over.
tests/test_launch.py checks the key against Triton's own specialization.
"""

from __future__ import annotations

from pathlib import Path

# The candidate's copy is the code between the two marker lines; it relies on the candidate's own imports (HEADER in
# stages/templates/source.py): torch, triton.
import torch
import triton

# --- the candidate's copy starts here ---
_KF_CAP = 1024
_KF_EXACT = (int, bool, float, str, type(None))
_kf_compiled: dict = {}  # key -> (CompiledKernel, the values of the kernel's parameters after the positional ones)


def _kf_arg(a):
    """One argument's part of the key, at least what Triton specializes the kernel on: a tensor's dtype and 16-byte
    alignment; a number's (or None's, a string's) type and value. TypeError for anything else: not cached."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if type(a) in _KF_EXACT:
        return type(a), a
    raise TypeError(type(a))


def _kf_hook(hook):
    """A launch hook as the launcher takes it: None for none, or for an empty chain of hooks (nothing to call)."""
    return None if hook is None or getattr(hook, "calls", None) == [] else hook


def _kf_launch(kernel, grid, *args, **meta):
    """kernel[grid](*args, **meta), through the compiled kernel's own launcher once the JIT has built it for this
    key (stages/templates/launch.py)."""
    key = None
    if isinstance(args[0], torch.Tensor) and args[0].is_cuda and not torch.compiler.is_compiling():
        device = torch.cuda.current_device()
        try:
            key = (kernel, device, *map(_kf_arg, args), *((k, _kf_arg(v)) for k, v in meta.items()))
        except TypeError:  # an argument of another type: the JIT's launch, every time
            key = None
        hit = _kf_compiled.get(key) if key is not None else None
        if hit is not None:
            compiled, tail = hit
            g = (*grid, 1, 1)
            stream = torch._C._cuda_getCurrentRawStream(device)
            enter = _kf_hook(triton.knobs.runtime.launch_enter_hook)
            compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata,
                         None if enter is None else compiled.launch_metadata(grid, stream, *args, *tail), enter,
                         _kf_hook(triton.knobs.runtime.launch_exit_hook), *args, *tail)
            return
    compiled = kernel[grid](*args, **meta)
    names = kernel.arg_names[len(args):] if key is not None else ()
    if key is not None and compiled is not None and all(n in meta for n in names):
        if len(_kf_compiled) >= _KF_CAP:
            _kf_compiled.clear()
        _kf_compiled[key] = compiled, tuple(meta[n] for n in names)
# --- the candidate's copy ends here ---


_LINES = Path(__file__).read_text().splitlines(keepends=True)
_FIRST = _LINES.index("# --- the candidate's copy starts here ---\n") + 1
SOURCE = "".join(_LINES[_FIRST:_LINES.index("# --- the candidate's copy ends here ---\n")]).strip() + "\n"


def call(kernel: str, grid: str, args: str) -> str:
    """The forward's launch of `kernel` on `grid` with `args` (a call's argument text, keywords included)."""
    return f"_kf_launch({kernel}, {grid}, {args})"
