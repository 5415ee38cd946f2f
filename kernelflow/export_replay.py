"""The export's lean host path: a template's forward, recorded once per input signature as its Triton launches, then
replayed with fresh outputs and no forward logic (docs/EXPORT.md, "Host path").

Why. KernelBench's procedure times a call from an event recorded behind its L2 flush; when the host takes longer to
reach the forward's first launch than the flush keeps the device busy, the wait is timed. A template's forward
spends most of its host time in Python around one launch, and in a slow process that can outlast the flush
(measured: docs/LOG.md).

Copied verbatim into every export whose model_new.py launches through `_kf_launch` (stages/templates/launch.py), as
replay.py; it imports only torch and triton. `replaying(ModelNew, model_new)` returns a subclass of the verified
class (same constructor, parameters and state_dict) whose forward:
- keys each call on its positional arguments: a tensor's shape, strides, dtype, device and 16-byte alignment (what
  Triton specialized the compiled kernels on), anything else on its type and value;
- on the first call of a key runs the verified forward (Triton compiles there);
- on the second records it: every `_kf_launch` with its compiled kernel, grid and arguments; every ATen op, under a
  dispatch mode; every Triton launch, through the launch-enter hook. It makes a plan only when the forward's work is
  all `_kf_launch` launches (ATen ops only to allocate and to view), every launch kept by the lean launch, and every
  tensor argument is found: in an input (at a byte offset from its data pointer), in a tensor of the module (a
  parameter, buffer or tensor attribute, found again by its path and pointer on every call), or in memory the forward
  allocated. The outputs must be in that memory;
- checks the plan once: replayed on copies of the inputs (other pointers), its memory filled with 0xFF first, every
  output must equal the forward's bit for bit, with the same shape, strides and dtype; so must the lean variant's;
- later calls of the key run the plan: one generated Python function that allocates, calls each compiled kernel's
  launcher (CompiledKernel.run, as `_kf_launch` does, with the tensors' data pointers as ints) and returns the
  outputs as views of what it allocated.

The verified forward runs instead, every call: on CPU and meta tensors, while torch.compile traces, while a launch
hook is set (a profiler then sees each launch with its metadata), and for an argument of another type. For a key
whose recording or check failed it runs on every later call of that key; `replay_status(model)` gives each key's
state and the reason. A module tensor that moved (`.to()`, a replaced parameter) sends its key back to recording.

The premise, which no check sees: the forward's launches depend on the key and the module's tensors only; not on
the inputs' values, nor on other attributes of the module changing after the second call. The templates' forwards
hold to it; that is why only exports of `_kf_launch` candidates replay.
"""

from __future__ import annotations

import collections
import operator
import threading
import weakref
from types import ModuleType
from typing import Any

import torch
import triton
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

_EXACT = (int, bool, float, str, type(None))
# ATen ops a recorded forward may run: allocations and views (an op that computes disqualifies the plan)
_ALLOCATIONS = frozenset({"empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like"})
_VIEWS = frozenset({"view", "_unsafe_view", "as_strided", "alias", "detach", "t", "transpose", "permute", "expand",
                    "unsqueeze", "squeeze", "slice", "select", "_reshape_alias", "unflatten", "split",
                    "split_with_sizes", "unbind", "narrow", "view_as"})
_SEEN = "seen once"  # a key's state after its first call: the next call records
_STALE = object()  # what a plan returns when a module tensor it launches on has moved
_RECORDING = threading.Lock()
REPLAY_DEVICES = {"cuda"}  # where a key is recorded (CPU tensors run Triton's interpreter, which nothing can replay)
_STREAM_OF = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # device index -> the current raw stream
_PLANS: weakref.WeakKeyDictionary[nn.Module, dict[tuple[Any, ...], Any]] = weakref.WeakKeyDictionary()


class NotReplayable(Exception):
    """Why a recorded forward cannot be replayed."""


def _key(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """The call's signature (module doc); TypeError for an argument of another type than tensors and numbers."""
    key: list[Any] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.shape, a.stride(), a.dtype, a.device, a.data_ptr() % 16 == 0))
        elif type(a) in _EXACT:
            key.append((type(a), a))
        else:
            raise TypeError(type(a))
    return tuple(key)


def _hooked() -> bool:
    """A Triton launch hook is set (a profiler's, or another tool's): the forward's own launches pass it metadata."""
    runtime = triton.knobs.runtime
    return bool(getattr(runtime.launch_enter_hook, "calls", True) or getattr(runtime.launch_exit_hook, "calls", True))


class _Ops(TorchDispatchMode):
    """The ATen ops a recorded forward runs: those that are not allocations or views, and what it allocated."""

    def __init__(self) -> None:
        super().__init__()
        self.computing: list[str] = []
        self.allocated: dict[int, int] = {}  # storages' data pointers -> their sizes in bytes

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _ALLOCATIONS:
            storage = out.untyped_storage()  # memory freed and allocated again in one forward: the larger block
            self.allocated[storage.data_ptr()] = max(storage.nbytes(), self.allocated.get(storage.data_ptr(), 0))
        elif name not in _VIEWS:
            self.computing.append(str(func))
        return out


def _moved(t: torch.Tensor) -> torch.Tensor:
    """t's values at another address, laid out alike: its whole storage copied, viewed with t's offset and strides."""
    raw = torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())
    return raw.clone().view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def _bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.shape == b.shape and a.stride() == b.stride() and a.dtype == b.dtype and a.device == b.device
            and torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)))


def _outputs(out: Any) -> list[torch.Tensor]:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        raise NotReplayable(f"the forward returns {type(out).__name__} with other things than tensors")
    return outs


def _module_tensors(model: nn.Module) -> dict[int, tuple[str, torch.Tensor]]:
    """The module's tensors by their storage's data pointer: parameters, buffers and tensor attributes, by path."""
    found: dict[int, tuple[str, torch.Tensor]] = {}
    for prefix, sub in model.named_modules(remove_duplicate=False):
        for name, value in [*sub._parameters.items(), *sub._buffers.items(), *vars(sub).items()]:
            if isinstance(value, torch.Tensor):
                path = f"{prefix}.{name}" if prefix else name
                found.setdefault(value.untyped_storage().data_ptr(), (path, value))
    return found


class _Builder:
    """One plan's generated source: names for its constants, the module tensors' checks, the launches."""

    def __init__(self, model: nn.Module, args: tuple[Any, ...], allocated: dict[int, int]):
        self.names: dict[str, Any] = {"torch": torch, "STALE": _STALE}
        self.inputs = {a.untyped_storage().data_ptr(): (i, a) for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
        self.state = _module_tensors(model)
        self.allocated = allocated
        self.buffers: dict[int, str] = {}  # storage pointer -> the plan's name for it
        self.checked: dict[str, str] = {}  # module path -> the plan's name for the tensor
        self.checks: list[str] = []
        self.runs: list[str] = []
        # the memory the forward could point into: an integer argument in here is a pointer the plan would keep stale
        self.ranges = [(p, p + n) for p, n in allocated.items()]
        self.ranges += [(p, p + t.untyped_storage().nbytes()) for p, (_, t) in [*self.inputs.items(), *self.state.items()]]

    def const(self, value: Any) -> str:
        name = f"c{len(self.names)}"
        self.names[name] = value
        return name

    def buffer(self, storage: int) -> str:
        return self.buffers.setdefault(storage, f"b{len(self.buffers)}")

    def tensor(self, t: torch.Tensor) -> str:
        """The expression for t's data pointer in a launch: an input's, a module tensor's or a buffer's, + an offset."""
        storage = t.untyped_storage().data_ptr()
        if storage in self.inputs:
            i, a = self.inputs[storage]
            base, offset = f"a[{i}]", t.data_ptr() - a.data_ptr()
        elif storage in self.state:
            path, s = self.state[storage]
            if path not in self.checked:
                name = self.checked[path] = f"s{len(self.checked)}"
                self.checks += [f"    {name} = {self.const(operator.attrgetter(path))}(self)",
                                f"    if {name}.data_ptr() != {s.data_ptr()}:", "        return STALE"]
            base, offset = self.checked[path], t.data_ptr() - s.data_ptr()
        elif storage in self.allocated:
            base, offset = self.buffer(storage), t.data_ptr() - storage
        else:
            raise NotReplayable("a launch reads a tensor that is neither an input, nor the module's, nor allocated "
                                "by the forward")
        if offset < 0:
            raise NotReplayable("a launch reads before its input's data pointer")
        # an int: Triton's launcher takes it as the pointer, where a tensor costs it a data_ptr() call and a driver
        # query (cuPointerGetAttribute) per argument
        return f"{base}.data_ptr()" if offset == 0 else f"{base}.data_ptr() + {offset}"

    def launch(self, compiled: Any, grid: tuple[int, ...], args: tuple[Any, ...], tail: tuple[Any, ...]) -> None:
        values = []
        for a in (*args, *tail):
            if isinstance(a, torch.Tensor):
                values.append(self.tensor(a))
            elif type(a) in _EXACT:
                if type(a) is int and any(lo <= a < hi for lo, hi in self.ranges):
                    raise NotReplayable("an integer launch argument points into a tensor's memory: a plan would keep "
                                        "the pointer")
                values.append(self.const(a))
            else:
                raise NotReplayable(f"a launch argument of type {type(a).__name__}")
        k, function, packed = self.const(compiled), self.const(compiled.function), self.const(compiled.packed_metadata)
        self.runs.append(f"    {k}.run({grid[0]}, {grid[1]}, {grid[2]}, stream, {function}, {packed}, None, None, None, "
                         f"{', '.join(values)})")


def _plan_source(model: nn.Module, args: tuple[Any, ...], outs: list[torch.Tensor], tuple_out: bool | None,
                 launches: list[Any], allocated: dict[int, int], poison: bool,
                 stream_of: Any) -> tuple[str, dict[str, Any]]:
    """The plan as a function `replay(self, a)`; `poison` allocates every buffer as bytes filled with 0xFF."""
    b = _Builder(model, args, allocated)
    for entry in launches:
        b.launch(*entry)
    for o in outs:
        if o.untyped_storage().data_ptr() not in allocated:
            raise NotReplayable("an output is not memory the forward allocated (an input, or the module's)")
        b.buffer(o.untyped_storage().data_ptr())
    device = outs[0].device
    uses = collections.Counter(o.untyped_storage().data_ptr() for o in outs)
    # an output that is the whole of its memory, and the only output there, is allocated as the forward allocated it
    whole = {o.untyped_storage().data_ptr(): o for o in outs if not poison and uses[o.untyped_storage().data_ptr()] == 1
             and o.storage_offset() == 0 and o.untyped_storage().nbytes() == _span_bytes(o)}
    dev = b.const(device)
    lines = [f"    stream = {b.const(stream_of)}({device.index})", *b.checks]
    for storage, name in b.buffers.items():
        if (w := whole.get(storage)) is not None:
            like = next((i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and a.shape == w.shape
                         and a.stride() == w.stride() and a.dtype == w.dtype and a.device == w.device
                         and a.is_contiguous()), None)
            if like is not None:  # the cheapest allocation on the host (measured: docs/LOG.md)
                lines.append(f"    {name} = torch.empty_like(a[{like}])")
            else:
                lines.append(f"    {name} = torch.empty_strided({tuple(w.shape)}, {w.stride()}, "
                             f"dtype={b.const(w.dtype)}, device={dev})")
        else:
            lines.append(f"    {name} = torch.empty({allocated[storage]}, dtype=torch.uint8, device={dev})")
            if poison:
                lines.append(f"    {name}.fill_(255)")
    results = []
    for o in outs:
        storage = o.untyped_storage().data_ptr()
        results.append(b.buffers[storage] if storage in whole else
                       f"{b.buffers[storage]}.view({b.const(o.dtype)}).as_strided({tuple(o.shape)}, {o.stride()}, "
                       f"{o.storage_offset()})")
    ret = results[0] if tuple_out is None else f"({', '.join(results)},)" if tuple_out else f"[{', '.join(results)}]"
    return "def replay(self, a):\n" + "\n".join([*lines, *b.runs, f"    return {ret}"]) + "\n", b.names


def _span_bytes(t: torch.Tensor) -> int:
    """Bytes from a tensor's first element to past its last (0 for an empty tensor)."""
    if t.numel() == 0:
        return 0
    return (sum((n - 1) * s for n, s in zip(t.shape, t.stride(), strict=True)) + 1) * t.element_size()


def _compile(source: str, names: dict[str, Any]) -> Any:
    scope = dict(names)
    exec(compile(source, "<kernelflow replay plan>", "exec"), scope)  # noqa: S102 - our generated plan (module doc)
    return scope["replay"]


class Plan:
    """A recorded forward: the lean function, kept with its source for inspection."""

    def __init__(self, source: str, fn: Any):
        self.source, self.fn = source, fn


def make_plan(model: nn.Module, args: tuple[Any, ...], out: Any, launches: list[Any], triton_launches: int,
              ops: _Ops, stream_of: Any) -> Plan:
    """The plan for one recorded call, checked (module doc); NotReplayable says why not. `stream_of(device index)`
    gives the raw stream to launch on (torch._C._cuda_getCurrentRawStream)."""
    if ops.computing:
        raise NotReplayable(f"the forward computes with ATen ops besides allocations and views: "
                            f"{', '.join(sorted(set(ops.computing))[:4])}")
    if not launches:
        raise NotReplayable("the forward launched nothing through _kf_launch")
    if any(entry is None for entry in launches):
        raise NotReplayable("a launch the lean launch does not keep (an argument or keyword of another type)")
    if triton_launches != len(launches):
        raise NotReplayable(f"{triton_launches} Triton launches, {len(launches)} of them through _kf_launch")
    outs = _outputs(out)
    tuple_out = None if isinstance(out, torch.Tensor) else isinstance(out, tuple)
    copies = tuple(_moved(a) if isinstance(a, torch.Tensor) else a for a in args)
    for poison in (True, False):
        source, names = _plan_source(model, args, outs, tuple_out, launches, ops.allocated, poison, stream_of)
        fn = _compile(source, names)
        got = fn(model, copies)
        if got is _STALE:
            raise NotReplayable("a module tensor moved while the plan was made")
        if not all(_bitwise_equal(g, o) for g, o in zip(_outputs(got), outs, strict=True)):
            raise NotReplayable("the replay's outputs differ from the forward's" + (" (its memory filled with 0xFF)"
                                                                                   if poison else ""))
    return Plan(source, fn)


def _record(model: nn.Module, forward: Any, args: tuple[Any, ...], module: ModuleType) -> tuple[Any, Any]:
    """Run the verified forward while recording; (its output, a Plan or the reason there is none)."""
    with _RECORDING:
        launches: list[Any] = []
        counted: list[int] = []

        def count(*_: Any) -> None:
            counted.append(1)

        chain = triton.knobs.runtime.launch_enter_hook
        ops = _Ops()
        setattr(module, "_kf_recording", launches)  # noqa: B010 - the candidate's global, read by its _kf_launch
        chain.add(count)
        try:
            with ops:
                out = forward(model, *args)
        finally:
            setattr(module, "_kf_recording", None)  # noqa: B010
            chain.remove(count)
    try:
        return out, make_plan(model, args, out, launches, len(counted), ops, _STREAM_OF)
    except NotReplayable as e:
        return out, str(e)
    except Exception as e:  # noqa: BLE001 - a plan that cannot be made or checked: the key keeps the verified forward
        return out, f"the plan could not be made or checked: {type(e).__name__}: {e}"


def replaying(cls: type[nn.Module], module: ModuleType) -> type[nn.Module]:
    """ModelNew with the lean host path (module doc); `module` is model_new, whose `_kf_launch` records."""
    if not hasattr(module, "_kf_recording"):
        raise TypeError(f"{module.__name__} does not launch through a recording _kf_launch")
    forward = cls.forward

    class Replayed(cls):  # type: ignore[valid-type,misc]
        __doc__ = cls.__doc__

        def forward(self, *args: Any) -> Any:
            if torch.compiler.is_compiling():  # dynamo traces the verified forward (fake tensors have no pointers)
                return forward(self, *args)
            try:
                key = _key(args)
            except (TypeError, RuntimeError):  # another type; a tensor without a data pointer (sparse, say)
                return forward(self, *args)
            plans = _PLANS.get(self)
            if plans is None:
                plans = _PLANS[self] = {}
            plan = plans.get(key)
            if type(plan) is Plan and not _hooked():
                out = plan.fn(self, args)
                if out is not _STALE:
                    return out
                plans[key] = _SEEN  # a module tensor moved: the next call records again
            elif plan is None:
                devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
                plans[key] = _SEEN if devices and devices <= REPLAY_DEVICES else (
                    f"tensors on {', '.join(sorted(devices)) or 'no device'}: the verified forward runs")
            elif plan is _SEEN and not _hooked():
                out, plans[key] = _record(self, forward, args, module)
                return out
            return forward(self, *args)

    Replayed.__name__ = Replayed.__qualname__ = cls.__name__
    Replayed.__module__ = cls.__module__
    return Replayed


def replay_status(model: nn.Module) -> dict[str, str]:
    """Each key's state so far: "replayed", "seen once" (recorded at its next call) or why it is not replayed."""
    return {repr(key): "replayed" if type(plan) is Plan else plan for key, plan in _PLANS.get(model, {}).items()}
