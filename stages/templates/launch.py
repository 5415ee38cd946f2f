"""The launch every template's forward makes: `_kf_launch(kernel, grid, *args, **meta)`, copied into each candidate.

It does what `kernel[grid](*args, **meta)` does with less of the host's time. The JIT binds the arguments,
specializes, builds a cache key and looks the kernel up on every launch; this function takes the JIT once per key
and then calls the compiled kernel's launcher, about half the JIT's host time a launch (measured: docs/LOG.md). A host
path longer than KernelBench's L2 flush is timed by its procedure. Eager's first launch is one ATen call, and a
model's host time adds up launch by launch.

The first launch of each key goes through the JIT, which compiles and launches. The CompiledKernel it returns is
kept under a key at least as fine as what Triton specializes on:
- the kernel (its id; a hit is used only if it holds that very kernel) and the current device;
- each positional argument: a tensor's dtype and 16-byte alignment, a number's type and value. Triton specializes
  a pointer on its dtype and alignment, an int on being 1, on divisibility by 16 and on its width, a constexpr on
  its value;
- each keyword (constexprs, and options such as num_warps) with its value; a launch whose keywords are not all
  numbers, strings or None is not kept.
Later launches with that key call the compiled kernel's launcher directly. The launch hooks are passed on as the
JIT passes them, so a profiler's hooks still see each launch. stages/harness/launches.py counts these launches at the same
place as the JIT's, CompiledKernel.run, so the harness's launch census and ghost replay see them.

The forward's own integer helpers, `_kf_pow2` and `_kf_cdiv`, replace triton.next_power_of_2 and triton.cdiv,
which cost the host several times as much a call. The templates allocate with `X.new_empty(shape, dtype=...)`,
cheaper than `torch.empty` with a device argument (measured: docs/LOG.md).

While an export records a forward (kernelflow/export_replay.py), `_kf_recording` is a list, and each launch
appends its compiled kernel, grid, arguments and trailing parameter values (None for a launch that is not kept).

Three cases always take the JIT: CPU and meta tensors (Triton's interpreter, and the compile stage's capture), a
torch.compile trace (dynamo traces `kernel[grid]`, not this cache), and arguments of other types than tensors,
numbers, strings and None. The grid is a tuple of one to three ints, as the templates write it. At most _KF_CAP keys
are kept; past that the cache starts over. tests/stages/templates/test_launch.py checks the key against Triton's own specialization,
and on a GPU the outputs, the census and the hooks (tests/fixtures/lean_launch_check.py).
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
_kf_compiled: dict = {}  # key -> (the kernel, its CompiledKernel, the values of its parameters after the positional ones)
_kf_recording = None  # a list while an export records the forward (kernelflow/export_replay.py); None otherwise


def _kf_pow2(n):
    """The least power of two >= n (1 for n <= 1): triton.next_power_of_2 without its cost on the host."""
    return 1 << max(n - 1, 0).bit_length()


def _kf_cdiv(a, b):
    """a / b rounded up, for ints: triton.cdiv without its cost on the host."""
    return -(a // -b)


def _kf_arg(a):
    """One positional argument's part of the key, at least what Triton specializes the kernel on: a tensor's dtype and
    16-byte alignment; a number's (or None's, a string's) type and value. TypeError for anything else: not cached."""
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
        device = torch._C._cuda_getDevice()
        try:
            key = (id(kernel), device, *map(_kf_arg, args), *meta.items())
            hit = _kf_compiled.get(key)
        except TypeError:  # an argument of another type, or an unhashable keyword: the JIT's launch, every time
            key = hit = None
        if hit is not None and hit[0] is kernel:
            _, compiled, tail = hit
            g = (*grid, 1, 1)
            stream = torch._C._cuda_getCurrentRawStream(device)
            enter = _kf_hook(triton.knobs.runtime.launch_enter_hook)
            compiled.run(g[0], g[1], g[2], stream, compiled.function, compiled.packed_metadata,
                         None if enter is None else compiled.launch_metadata(grid, stream, *args, *tail), enter,
                         _kf_hook(triton.knobs.runtime.launch_exit_hook), *args, *tail)
            if _kf_recording is not None:
                _kf_recording.append((compiled, g, args, tail))
            return
    compiled = kernel[grid](*args, **meta)
    names = kernel.arg_names[len(args):]
    # a keyword's value is its exact part of the key: only numbers, strings and None are kept
    kept = (key is not None and compiled is not None and all(type(v) in _KF_EXACT for v in meta.values())
            and all(n in meta for n in names))
    tail = tuple(meta[n] for n in names) if kept else None
    if _kf_recording is not None:  # a launch that is not kept cannot be replayed: None says so
        _kf_recording.append((compiled, (*grid, 1, 1), args, tail) if kept else None)
    if kept:
        if len(_kf_compiled) >= _KF_CAP:
            _kf_compiled.clear()
        _kf_compiled[key] = kernel, compiled, tail
# --- the candidate's copy ends here ---


_LINES = Path(__file__).read_text().splitlines(keepends=True)
_FIRST = _LINES.index("# --- the candidate's copy starts here ---\n") + 1
SOURCE = "".join(_LINES[_FIRST:_LINES.index("# --- the candidate's copy ends here ---\n")]).strip() + "\n"


def call(kernel: str, grid: str, args: str) -> str:
    """The forward's launch of `kernel` on `grid` with `args` (a call's argument text, keywords included)."""
    return f"_kf_launch({kernel}, {grid}, {args})"
