"""Inductor's output, read: the one file that knows how torch.compile's Inductor writes code and how to stop it.

`lower(request)` runs in a process of its own (`python -m kernelflow.stages.templates.inductor_output REQ RES`,
started by stages/templates/inductor.py): it builds the problem's Model and inputs at one workload on the target
device, has Dynamo trace forward (eval mode, as the harness runs it) with dynamic shapes (every dim of inputs and parameters a symbol, no duck sizing,
floats specialized; fullgraph, no_grad) and Inductor lower that graph for the device (`cpu_backend = "triton"` on
the CPU), with its caches off, and stops it at GraphLowering.codegen: the wrapper's source is kept and nothing is
compiled, loaded or run. On the CPU Triton has no driver here; the one call that needs one during codegen (the
backend hash `torch.utils._triton.triton_hash_with_backend`, which only keys caches) is answered with a constant.

What is read from that source (Inductor 2.11 to 2.13; anything else is `Unreadable`, with what was not understood):
- kernels: `NAME = async_compile.triton('NAME', '''SOURCE''', ...)`. In SOURCE, the function decorated with
  `@triton_heuristics.<kind>(...)` and `@triton.jit`, with the plain @triton.jit functions beside it (a scan's
  combine function, renamed `_kf_NAME_<its name>`); its candidate launch configurations are that decorator's
  (evaluated with `triton_heuristics.cached_autotune` swapped for a recorder: nothing is compiled); its launch
  parameters are the signature's constexprs that the configurations set (XBLOCK, R0_BLOCK, ...), after the
  positional ones; its grid is Inductor's own GridExpr for `inductor_meta['grid_type']`, written in those names;
  a kernel with `no_x_dim` keeps its XBLOCK.
- helpers: `triton_helpers.NAME` in a kernel is copied in as `_kf_th_NAME` (with the helpers and constexprs it uses
  in turn); `libdevice` and `tl_math` are Triton's own modules. The candidate imports nothing of torch._inductor.
- the wrapper's `call(args)` (a function, or the method of `Runner`): `a, b = args` binds the graph's inputs, in
  Dynamo's placeholder order, whose sources (`L['x']`, `L['self']._modules['conv']._parameters['weight']`,
  `L['x'].size()[0]`) become forward's expressions; `K.run(*args, stream=...)` is a launch of kernel K;
  `empty_strided_<device>(size, stride, dtype)` becomes torch.empty_strided on the inputs' device,
  `reinterpret_tensor(t, size, stride, offset)` t.as_strided; `extern_kernels.NAME(...)` a torch function of that
  name, or (Inductor's own Python wrappers such as bias_addmm) the function's source copied in as `_kf_ext_NAME`;
  `aten.OP...(...)` stays; device guards, streams, set_device and size/alignment asserts are dropped (a tensor input
  contiguous at the workload is made contiguous); `return (a, b, )` gives the outputs.
A size the code asserts as a number (Dynamo or Inductor specialized it) that another declared workload, or the
held-out shape verify derives, changes is Unreadable: that code would run at this shape only; so is code that
differs (launch configurations aside) when Inductor is run again at that held-out shape (a module constant such
as a group count built in; a split reduction's part count, Inductor's choice from the sizes, is told apart by
generating both shapes with split reductions off). The held-out shape is the first of stages/problems/held_out.py's
(the input sizes moved, then each alone, then every size) at which the reference builds and runs on meta tensors,
as verify takes the first at which it is usable; each one skipped is a note of the result (`notes`, written into
the candidate's header), never a refusal, and where none is valid there is nothing to compare with, as verify then
checks none.
Then, for each declared workload of the request's `verified` size sets (those verify runs on the device: on cuda
both, the CPU set's small shapes too), Inductor's code for that workload's sizes alone
(dynamic=False, torch.compile's default: index arithmetic over constants, tiling and reduction choices for those
sizes, Inductor's own conv lowering with its layout choice where the symbolic code calls aten.convolution), read
the same way with its kernels named after the workload, under `static`, each with the guard under which it runs: every tensor graph input's sizes (and strides where it is not made contiguous) and the value of
every number forward takes. A workload whose code cannot be had is a note, and the symbolic code runs there. The
symbolic code holds the module constants Dynamo specialized at the generating workload (a group count, a kernel
size), so it is right only where they are the same: a declared workload of the other set may change them, hence
its own code, and (`architectures`) the symbolic code generated again for each such module where it differs,
which forward picks by the module's init arguments. A workload's code is `timed` where it is of the request's set
(the shapes the benchmark times), and holds the key (`arch`) of the module it was generated for. `modules`: the
keys of the other modules the symbolic code was checked for (the generating workload's, the verified workloads'
without code of their own, the held-out shape's); code runs for no module outside these and the architectures'.
On cuda, each timed kernel's configurations start with the one Inductor's autotuner picks on this GPU, from one
real run of torch.compile at that workload (otherwise they are Inductor's candidates in its own order, which the
autotuner times).
The result is plain data (JSON): the candidate module is written from it by stages/templates/inductor.py.
"""

from __future__ import annotations

import ast
import contextlib
import inspect
import json
import math
import re
import sys
import textwrap
from collections.abc import Callable, Iterator
from typing import Any

FORMAT = 19  # what `lower` returns; part of the cache key (stages/templates/inductor.py)
KNOBS: dict[str, bool] = {  # Inductor's code-generation choices the family tunes, with Inductor's defaults here
    "split_reductions": True,  # a long reduction becomes two kernels (partial sums, then their sum)
    "aggressive_fusion": False,  # fuse nodes that share no memory access too
    "prefer_nd_tiling": False,  # tile pointwise kernels in 2-D/3-D where strides allow
    "persistent_reductions": True,  # a short reduction in registers, not looped (static sizes only)
    "max_autotune": False,  # GEMM/conv as Triton templates where they beat the vendor call (timed on the GPU)
    "triton_gemm": False,  # with max_autotune: Triton templates only, never the vendor call
    "allow_tf32": False,  # TF32 products in Triton GEMM/conv templates (only where the policy allows TF32)
}
GRIDS = ("Grid1D", "Grid2D", "Grid3D", "Grid2DWithYZOverflow", "BatchMatmulGrid3D", "SplitScanGrid", "FixedGrid")
_DROPPED_CALLS = {"assert_size_stride", "assert_alignment", "get_raw_stream", "check_memory_tracking"}
_ALLOWED_NAMES = {"torch", "math", "aten", "_kf_device", "_kf_launch", "_kf_cdiv", "max", "min", "int", "float",
                  "abs", "None", "True", "False", "len", "tuple", "range"}


class Unreadable(Exception):
    """Inductor could not lower the reference, or wrote something this reader does not understand."""


def _source_name(source: Any) -> str:
    name = source.name
    return name() if callable(name) else name


def _forward_expr(source: str) -> str:
    """Dynamo's source of a graph input as an expression in forward: L['x'] -> x, G['w'] -> w."""
    expr = re.sub(r"\b[LG]\['(\w+)'\]", r"\1", source)
    expr = re.sub(r"\._(?:modules|parameters|buffers)\['([A-Za-z_]\w*)'\]", r".\1", expr)
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        raise Unreadable(f"Dynamo reads a graph input from {source}, not an expression of forward's") from None
    for node in ast.walk(tree):
        ok = isinstance(node, (ast.Expression, ast.Name, ast.Attribute, ast.Subscript, ast.Constant, ast.Load))
        if isinstance(node, ast.Call):
            ok = isinstance(node.func, ast.Attribute) and node.func.attr in ("size", "stride") and not node.args
        if not ok:
            raise Unreadable(f"Dynamo reads a graph input from {source}, not an expression of forward's")
    return expr


ARCH_SOURCE = '''def _kf_arch(init, args, kwargs):
    """The module's init arguments, defaults filled in, as one string: which module (architecture) it is. A tensor
    counts by its shape and dtype (not its values), an object whose repr is its address by its type."""
    import inspect
    import json

    def part(value):
        shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
        if shape is not None and dtype is not None:
            return f"tensor({list(shape)}, {dtype})"
        text = repr(value)
        return type(value).__qualname__ if " at 0x" in text else text

    bound = inspect.signature(init).bind(None, *args, **kwargs)
    bound.apply_defaults()
    return json.dumps(list(bound.arguments.values())[1:], default=part)
'''  # written into the candidate as is, and run here for the keys it compares with


_ARCH: dict[str, Any] = {}
exec(ARCH_SOURCE, _ARCH)


def arch_key(init: Any, args: list[Any]) -> str:
    return str(_ARCH["_kf_arch"](init, args, {}))


def _configure(device: str, knobs: dict[str, bool]) -> None:
    import torch
    import torch._dynamo.config as dynamo
    import torch._inductor.config as inductor
    import torch.fx.experimental._config as fx

    dynamo.specialize_float = True  # a float attribute is a constant of the code (held-out shapes move ints only)
    dynamo.force_parameter_static_shapes = False  # a held-out shape may change channel counts
    dynamo.force_nn_module_property_static_shapes = False
    fx.use_duck_shape = False  # two dims equal at this workload are still two symbols
    inductor.force_disable_caches = True  # a cache hit would skip codegen
    inductor.compile_threads = 1
    inductor.freezing = False  # parameters stay inputs, so the candidate reads the module's own
    inductor.triton.cudagraphs = False
    if hasattr(inductor, "graph_partition"):
        inductor.graph_partition = False
    inductor.split_reductions = knobs["split_reductions"]
    inductor.aggressive_fusion = knobs["aggressive_fusion"]
    inductor.triton.prefer_nd_tiling = knobs["prefer_nd_tiling"]
    inductor.triton.persistent_reductions = knobs["persistent_reductions"]
    inductor.max_autotune = inductor.max_autotune_gemm = knobs["max_autotune"]
    if knobs["triton_gemm"]:
        inductor.max_autotune_gemm_backends = inductor.max_autotune_conv_backends = "TRITON"
    torch.backends.cuda.matmul.allow_tf32 = knobs["allow_tf32"]  # what Inductor's GEMM templates read
    torch.backends.cudnn.allow_tf32 = knobs["allow_tf32"]  # its conv templates (cuDNN's default here would be TF32)
    if device == "cpu":
        import torch.utils._triton as triton_utils

        inductor.cpu_backend = "triton"
        triton_utils.triton_hash_with_backend = lambda: "KERNELFLOW-CPU-CODEGEN"  # type: ignore[assignment]  # keys caches only


@contextlib.contextmanager
def _conv_fallback(on: bool) -> Iterator[None]:
    """While `on`, convolutions lower to a plain call of aten.convolution: Inductor's own conv lowering writes the
    weight's sizes into symbolic code as numbers. Code for one workload's sizes keeps Inductor's lowering, as
    torch.compile runs it (its layout choice: channels-last around the convolution where that is faster)."""
    if not on:
        yield
        return
    import torch
    from torch._inductor import lowering

    saved = dict(lowering.lowerings), lowering.needs_realized_inputs.copy()
    lowering.make_fallback(torch.ops.aten.convolution, warn=False)
    try:
        yield
    finally:
        lowering.lowerings.clear()
        lowering.lowerings.update(saved[0])
        lowering.needs_realized_inputs.clear()
        lowering.needs_realized_inputs.update(saved[1])


Input = tuple[str, str, list[str], list[str]]  # a graph input: forward's expression, its kind, its sizes and strides
# as Dynamo traced them


def capture(model: Any, inputs: list[Any], dynamic: bool = True) -> tuple[str, list[Input], int]:
    """(the wrapper's source, the graph inputs, the graph's output count): Inductor stopped at codegen, for symbolic
    sizes (`dynamic`) or for these inputs' sizes alone. Raises Unreadable with Dynamo's or Inductor's own error."""
    import torch
    import torch._inductor.config as inductor
    from torch._inductor.compile_fx import compile_fx
    from torch._inductor.graph import GraphLowering

    class Stop(Exception):
        pass

    codes: list[str] = []
    graphs: list[tuple[str, list[Input], int]] = []
    real_codegen = GraphLowering.codegen

    def codegen(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_codegen(self, *args, **kwargs)
        code: Any = out[0] if isinstance(out, tuple) else out
        codes.append(code.value if hasattr(code, "value") else code)
        raise Stop

    def backend(gm: Any, example_inputs: list[Any]) -> Any:
        inputs = []
        for node in gm.graph.find_nodes(op="placeholder"):
            arg = node.meta.get("grapharg")
            if arg is None:
                raise Unreadable(f"Dynamo's graph input {node.name} has no source")
            example = node.meta.get("example_value", getattr(arg, "example", None))
            kind, sizes, strides = type(example).__name__.lower(), [], []
            if isinstance(example, torch.Tensor):  # a contiguous one is made contiguous: Inductor assumed it
                kind = "contiguous" if example.is_contiguous() else "tensor"
                sizes, strides = [str(d) for d in example.shape], [str(d) for d in example.stride()]
            inputs.append((_forward_expr(_source_name(arg.source)), kind, sizes, strides))
        outputs = next(iter(gm.graph.find_nodes(op="output"))).args[0]
        before = len(codes)
        try:
            compile_fx(gm, example_inputs)
        except Exception as e:
            if len(codes) == before:
                raise Unreadable(f"Inductor cannot lower the graph: {type(e).__name__}: {str(e)[:400]}") from e
        else:
            raise Unreadable("Inductor finished without reaching GraphLowering.codegen (a cache or a new path)")
        graphs.append((codes[-1], inputs, len(outputs) if isinstance(outputs, (tuple, list)) else 1))
        raise Stop

    GraphLowering.codegen = codegen  # type: ignore[method-assign]
    try:
        with torch.no_grad(), _conv_fallback(dynamic and not inductor.max_autotune):
            torch.compile(model, backend=backend, dynamic=dynamic, fullgraph=True)(*inputs)
    except Exception as e:
        if not graphs:
            cause: BaseException = e
            while cause.__cause__ is not None and not isinstance(cause, Unreadable):
                cause = cause.__cause__
            if isinstance(cause, Unreadable):
                raise cause from None
            raise Unreadable(f"torch.compile cannot compile forward: {type(e).__name__}: "
                             f"{str(e).splitlines()[0][:400] if str(e) else ''}") from e
    finally:
        GraphLowering.codegen = real_codegen  # type: ignore[method-assign]
    return graphs[-1]


def _configs(kernel_source: str, decorator: ast.Call) -> tuple[list[dict[str, Any]], dict, dict]:
    """The decorator's candidate launch configurations, its triton_meta and its inductor_meta."""
    from torch._inductor.runtime import triton_heuristics

    seen: dict[str, Any] = {}

    def record(size_hints: Any, configs: Any, triton_meta: Any = None, heuristic_type: Any = None,
               filename: Any = None, inductor_meta: Any = None, **_: Any) -> None:
        seen.update(configs=configs, triton_meta=triton_meta, inductor_meta=inductor_meta or {})
        enforce = getattr(triton_heuristics, "_enforce_reduction_config_block_minimums", None)
        if enforce is not None and size_hints is not None and "REDUCTION" in str(heuristic_type):
            seen["configs"] = enforce(configs, size_hints, inductor_meta or {})

    namespace: dict[str, Any] = {"__file__": "kernel.py"}
    module = ast.parse(kernel_source)
    imports: list[ast.stmt] = [s for s in module.body if isinstance(s, (ast.Import, ast.ImportFrom))]
    exec(compile(ast.Module(body=imports, type_ignores=[]), "kernel.py", "exec"), namespace)
    real = triton_heuristics.cached_autotune
    triton_heuristics.cached_autotune = record  # type: ignore[assignment]
    try:
        eval(compile(ast.Expression(body=decorator), "kernel.py", "eval"), namespace)
    finally:
        triton_heuristics.cached_autotune = real
    if "configs" not in seen:
        raise Unreadable(f"the kernel's decorator {ast.unparse(decorator.func)} gave no configurations")
    configs: list[dict[str, Any]] = []
    for c in seen["configs"]:
        config = {"kwargs": dict(c.kwargs), "num_warps": int(c.num_warps), "num_stages": int(c.num_stages)}
        if config not in configs:
            configs.append(config)
    return configs, seen["triton_meta"] or {}, seen["inductor_meta"]


def _grid(inductor_meta: dict, meta: dict[str, Any]) -> dict[str, Any]:
    from torch._inductor.runtime.triton_heuristics import GridExpr

    kind = inductor_meta.get("grid_type")
    if kind not in GRIDS:
        raise Unreadable(f"grid type {kind!r} of kernel {inductor_meta.get('kernel_name')} is not one of {GRIDS}")
    grid = GridExpr.from_meta(inductor_meta, meta, mode="python")
    return {"prefix": list(grid.prefix), "dims": [str(grid.x_grid), str(grid.y_grid), str(grid.z_grid)]}


class _Helpers:
    """triton_helpers functions a kernel calls, copied in as _kf_th_NAME with what they use in turn."""

    def __init__(self) -> None:
        self.done: dict[str, str] = {}

    def rename(self, source: str) -> str:
        for name in sorted(set(re.findall(r"\btriton_helpers\.(\w+)", source))):
            self.add(name)
        return re.sub(r"\btriton_helpers\.(\w+)", r"_kf_th_\1", source)

    def add(self, name: str) -> None:
        from torch._inductor.runtime import triton_helpers

        if name in self.done:
            return
        value: Any = getattr(triton_helpers, name, None)
        self.done[name] = ""  # before recursing: helpers may call each other
        if hasattr(value, "fn") and callable(value.fn):  # a JITFunction
            tree = ast.parse(textwrap.dedent(inspect.getsource(value.fn)))
            fn = tree.body[0]
            assert isinstance(fn, ast.FunctionDef)
            fn.decorator_list = [ast.parse("triton.jit", mode="eval").body]
            fn.name = f"_kf_th_{name}"
            local = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
            for node in ast.walk(fn):
                if isinstance(node, ast.Name) and node.id not in local and hasattr(triton_helpers, node.id) \
                        and node.id not in ("tl", "triton", "libdevice", "math"):
                    self.add(node.id)
                    node.id = f"_kf_th_{node.id}"
                elif isinstance(node, ast.Name) and node.id == "math":
                    node.id = "tl_math"
            self.done[name] = ast.unparse(tree)
        elif hasattr(value, "value") and isinstance(value.value, (int, float, bool)):  # a tl.constexpr
            self.done[name] = f"_kf_th_{name} = tl.constexpr({value.value!r})"
        elif isinstance(value, (int, float, bool)):
            self.done[name] = f"_kf_th_{name} = tl.constexpr({value!r})"
        else:
            raise Unreadable(f"triton_helpers.{name} is not a Triton function or constant")


def _kernel(name: str, source: str, helpers: _Helpers) -> dict[str, Any]:
    """One kernel's source read: the function Inductor decorated with triton_heuristics (its launch configurations,
    parameters and grid), taken with the plain @triton.jit functions beside it that it calls (a scan's combine
    function), these renamed after the kernel, since two kernels' helpers may share a name."""
    module = ast.parse(source)
    fns = [s for s in module.body if isinstance(s, ast.FunctionDef)]
    kernels = [f for f in fns if any(isinstance(d, ast.Call) and ast.unparse(d.func).startswith("triton_heuristics.")
                                     for d in f.decorator_list)]
    if len(kernels) != 1:
        raise Unreadable(f"kernel {name}: {len(kernels)} functions with a triton_heuristics decorator in its source, "
                         "not one")
    fn = kernels[0]
    calls = [d for d in fn.decorator_list if isinstance(d, ast.Call)
             and ast.unparse(d.func).startswith("triton_heuristics.")]
    if len(calls) != 1 or len(fn.decorator_list) != 2:
        raise Unreadable(f"kernel {name}: decorators {[ast.unparse(d) for d in fn.decorator_list]} are not "
                         "one triton_heuristics decorator and @triton.jit")
    jitted = [f for f in fns if f is not fn]
    for f in jitted:
        if [ast.unparse(d) for d in f.decorator_list] != ["triton.jit"]:
            raise Unreadable(f"kernel {name}: its helper {f.name} has decorators "
                             f"{[ast.unparse(d) for d in f.decorator_list]}, not only @triton.jit")
    configs, triton_meta, inductor_meta = _configs(source, calls[0])
    params = [a.arg for a in fn.args.args]
    signature = triton_meta.get("signature", {})
    set_by_configs = sorted({k for c in configs for k in c["kwargs"]})
    if any(signature.get(k) != "constexpr" for k in set_by_configs):
        raise Unreadable(f"kernel {name}: its configurations set {set_by_configs}, not all constexprs")
    positional = params[:len(params) - len(set_by_configs)]
    if sorted(params[len(positional):]) != set_by_configs:
        raise Unreadable(f"kernel {name}: the parameters its configurations set ({set_by_configs}) are not last")
    fixed = {"XBLOCK"} if inductor_meta.get("no_x_dim") else set()
    tunable = [k for k in params[len(positional):] if k not in fixed]
    meta = {k: (k if k in tunable else configs[0]["kwargs"][k]) for k in set_by_configs}
    lines = source.splitlines()
    text = "\n\n".join("@triton.jit\n" + "\n".join(lines[f.lineno - 1:f.end_lineno]) for f in [*jitted, fn])
    for f in jitted:
        text = re.sub(rf"\b{re.escape(f.name)}\b", f"_kf_{name}_{f.name.lstrip('_')}", text)
    return {"name": name, "source": helpers.rename(text), "positional": positional, "tunable": tunable,
            "fixed": {k: v for k, v in configs[0]["kwargs"].items() if k not in tunable},
            "configs": configs, "grid": _grid(inductor_meta, meta),
            "extra_args": list(inductor_meta.get("extra_launcher_args", []))}


def _extern(name: str, externs: dict[str, str]) -> str:
    """extern_kernels.NAME as the candidate calls it: torch.NAME, or Inductor's Python wrapper copied in."""
    import torch
    from torch._inductor.select_algorithm import extern_kernels

    fn = getattr(extern_kernels, name, None)
    if fn is None:
        raise Unreadable(f"extern_kernels.{name} is unknown")
    if getattr(torch, name, None) is fn:
        return f"torch.{name}"
    if inspect.isfunction(fn) and fn.__module__.startswith("torch._inductor"):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        fn_def = tree.body[0]
        assert isinstance(fn_def, ast.FunctionDef)
        fn_def.decorator_list, fn_def.name = [], f"_kf_ext_{name}"
        free = {n.id for n in ast.walk(fn_def) if isinstance(n, ast.Name)} - \
            {a.arg for a in ast.walk(fn_def) if isinstance(a, ast.arg)} - \
            {n.id for n in ast.walk(fn_def) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        if free - {"torch", "aten", "len", "isinstance", "int", "tuple", "list"}:
            raise Unreadable(f"extern_kernels.{name} uses {sorted(free)}, not only torch")
        externs[name] = ast.unparse(tree)
        return f"_kf_ext_{name}"
    raise Unreadable(f"extern_kernels.{name} is {fn!r}, neither a torch function nor a Python wrapper")


class _Call(ast.NodeTransformer):
    """The wrapper's call body as forward's statements (see the module docstring); `asserted` keeps the sizes the
    code asserts for each graph input (a number there is a size the code holds fixed)."""

    def __init__(self, kernels: dict[str, int], externs: dict[str, str], inputs: dict[str, Input]):
        self.kernels, self.externs, self.inputs = kernels, externs, inputs
        self.asserted: dict[str, list[str]] = {}
        self.launches: list[dict[str, Any]] = []
        self.ops: list[str] = []  # torch ops called outside kernels (aten.NAME), for the policy

    def visit_With(self, node: ast.With) -> Any:  # device guards: the inputs' device is current
        text = ast.unparse(node.items[0].context_expr)
        if "DeviceGuard" not in text and "device(" not in text:
            raise Unreadable(f"the wrapper enters {text}")
        return [self.visit(s) for s in node.body]

    def visit_Expr(self, node: ast.Expr) -> Any:
        call = node.value
        if isinstance(call, ast.Call):
            func = ast.unparse(call.func)
            if func in _DROPPED_CALLS or func in ("torch.cuda.set_device", "args.clear"):
                if func == "assert_size_stride" and isinstance(call.args[0], ast.Name) and \
                        call.args[0].id in self.inputs and isinstance(call.args[1], ast.Tuple):
                    expr = self.inputs[call.args[0].id][0]
                    self.asserted[expr] = [ast.unparse(e) for e in call.args[1].elts]
                return None
            if isinstance(call.func, ast.Attribute) and call.func.attr == "run" and \
                    isinstance(call.func.value, ast.Name) and call.func.value.id in self.kernels:
                if any(k.arg not in ("stream",) for k in call.keywords):
                    raise Unreadable(f"a launch of {call.func.value.id} passes {[k.arg for k in call.keywords]}")
                marker = len(self.launches)
                self.launches.append({"kernel": self.kernels[call.func.value.id],
                                      "args": [ast.unparse(self.visit(a)) for a in call.args]})
                return ast.parse(f"_kf_launch_marker({marker})").body[0]
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> Any:
        if isinstance(node.value, ast.Call) and ast.unparse(node.value.func) == "get_raw_stream":
            return None
        return self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> Any:
        self.generic_visit(node)
        func = ast.unparse(node.func)
        if re.fullmatch(r"empty_strided_\w+", func) and len(node.args) == 3:
            size, stride, dtype = node.args
            return ast.parse(f"torch.empty_strided({ast.unparse(size)}, {ast.unparse(stride)}, "
                             f"dtype={ast.unparse(dtype)}, device=_kf_device)", mode="eval").body
        if func == "reinterpret_tensor":
            base, *rest = node.args
            return ast.Call(ast.Attribute(base, "as_strided", ast.Load()), rest, node.keywords)
        if func.startswith("extern_kernels."):
            name = func.split(".", 1)[1]
            self.ops.append(f"aten.{name}")
            return ast.Call(ast.parse(_extern(name, self.externs), mode="eval").body, node.args, node.keywords)
        if func.startswith(("aten.", "torch.ops.aten.")):
            self.ops.append("aten." + func.removeprefix("torch.ops.").removeprefix("aten.").split(".")[0])
        return node


def read(code: str, inputs: list[Input], n_outputs: int, suffix: str = "") -> dict[str, Any]:
    """The wrapper source as plain data: kernels (each named with `suffix` after Inductor's name), helpers, the
    forward's statements and launches."""
    module = ast.parse(code)
    kernels: list[dict[str, Any]] = []
    wrapper_names: list[str] = []
    helpers = _Helpers()
    for stmt in module.body:
        if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Call) and \
                ast.unparse(stmt.value.func).startswith("async_compile."):
            kind = ast.unparse(stmt.value.func).split(".", 1)[1]
            name = ast.unparse(stmt.targets[0])
            if kind != "triton":
                raise Unreadable(f"Inductor emitted a {kind} kernel ({name}), not Triton")
            source = stmt.value.args[1]
            assert isinstance(source, ast.Constant) and isinstance(source.value, str)
            wrapper_names.append(name)
            kernels.append(_kernel(name + suffix, re.sub(rf"\b{re.escape(name)}\b", name + suffix, source.value),
                                   helpers))
    fns = [s for s in ast.walk(module) if isinstance(s, ast.FunctionDef) and s.name == "call"]
    if len(fns) != 1:
        raise Unreadable(f"{len(fns)} functions named call in the wrapper, not one")
    body = fns[0].body
    unpack = body[0]
    if not (isinstance(unpack, ast.Assign) and ast.unparse(unpack.value) == "args"):
        raise Unreadable(f"the wrapper's call starts with {ast.unparse(unpack)}, not the unpacking of args")
    target = unpack.targets[0]
    names = [ast.unparse(e) for e in target.elts] if isinstance(target, ast.Tuple) else [ast.unparse(target)]
    if len(names) != len(inputs):
        raise Unreadable(f"the wrapper's call takes {len(names)} inputs, Dynamo's graph {len(inputs)}")
    ret = body[-1]
    if not isinstance(ret, ast.Return) or ret.value is None:
        raise Unreadable("the wrapper's call does not end with a return")
    outputs = [ast.unparse(e) for e in ret.value.elts] if isinstance(ret.value, ast.Tuple) else []
    if len(outputs) != n_outputs:
        raise Unreadable(f"the wrapper's call returns {len(outputs)} values, Dynamo's graph {n_outputs}")
    externs: dict[str, str] = {}
    call = _Call({n: i for i, n in enumerate(wrapper_names)}, externs, dict(zip(names, inputs, strict=True)))
    stmts = [s for stmt in body[1:-1] for s in _flat(call.visit(stmt))]
    lines = [ast.unparse(s) for s in stmts]
    bound = set(names) | set(wrapper_names) | {f"_kf_ext_{n}" for n in externs} | \
        {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    free = {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unknown = free - bound - _ALLOWED_NAMES - {"_kf_launch_marker"}
    if unknown:
        raise Unreadable(f"the wrapper's call uses {sorted(unknown)}, which this reader does not translate")
    tensors = [n for n, (_, kind, *_) in zip(names, inputs, strict=True) if kind in ("tensor", "contiguous")]
    if not tensors:
        raise Unreadable("the graph has no tensor input to take the device from")
    prologue = [f"{n} = {expr}" + (".contiguous()" if kind == "contiguous" else "")
                for n, (expr, kind, *_) in zip(names, inputs, strict=True)]
    prologue.append(f"_kf_device = {tensors[0]}.device")
    from torch._inductor.runtime.triton_compat import libdevice, math

    return {"kernels": kernels, "helpers": [h for h in helpers.done.values() if h], "externs": list(externs.values()),
            "prologue": prologue, "body": lines, "launches": call.launches, "outputs": outputs,
            "ops": sorted(set(call.ops)), "libdevice": libdevice.__name__, "tl_math": math.__name__,
            "asserted": call.asserted}


def _flat(node: Any) -> list[ast.stmt]:
    if node is None:
        return []
    if isinstance(node, list):
        return [s for n in node for s in _flat(n)]
    return [node]


def lower(req: dict[str, Any]) -> dict[str, Any]:
    """{"lowered": ...} or {"unreadable": reason} for a request {problem_path, workload (params), device, knobs}."""
    import torch
    import triton

    from kernelflow.stages.contracts import Workload
    from kernelflow.stages.problems.kernelbench import import_problem, workload_call

    device, knobs = req["device"], {**KNOBS, **req["knobs"]}
    _configure(device, knobs)
    module = import_problem(req["problem_path"])
    workload = Workload(name="inductor", params=req["workload"])
    init = workload_call(module, workload, "get_init_inputs", req["problem_path"])
    model, inputs, args = _model_at(module, workload, device, req["problem_path"])
    code, graph_inputs, n_outputs = capture(model, inputs)
    try:  # the output's structure (a tensor, a tuple or a list of them), from a run on meta tensors
        with torch.device("meta"):
            shape = module.Model(*init).eval()(*args)
    except Exception as e:
        raise Unreadable(f"forward does not run on meta tensors ({type(e).__name__}: {e})") from e
    leaves = [shape] if isinstance(shape, torch.Tensor) else list(shape) if type(shape) in (tuple, list) else None
    if leaves is None or not all(isinstance(t, torch.Tensor) for t in leaves):
        raise Unreadable(f"forward returns {type(shape).__name__}, not a tensor or a tuple of tensors")
    lowered = read(code, graph_inputs, n_outputs)
    sets = {k: [Workload(name=f"{k}{i}", params=p) for i, p in enumerate(ps)]
            for k, ps in req.get("workloads", {}).items()}
    every = [w for ws in sets.values() for w in ws]
    held: dict[str, Workload] = {}
    notes: list[str] = []
    for k, ws in sets.items():
        h, skipped = _held_out_shape(module, ws, every, req["problem_path"])
        notes += [n for n in skipped if n not in notes]
        if h is not None:
            held[k] = h
    mine_set = sets.get(req.get("sizes", "cpu"), [])
    verified = [w for k in req.get("verified", [req.get("sizes", "cpu")]) for w in sets.get(k, [])]
    mine, skipped = _held_out_shape(module, verified, every, req["problem_path"])  # verify's, on this device
    notes += [n for n in skipped if n not in notes]
    keys: dict[str, str | None] = {}

    def key_of(w: Any) -> str | None:  # the module's key at w, None where the reference's get_init_inputs fails
        params = json.dumps(w.params, sort_keys=True)
        if params not in keys:
            try:
                keys[params] = arch_key(module.Model.__init__,
                                        workload_call(module, w, "get_init_inputs", req["problem_path"]))
            except Exception:
                keys[params] = None
        return keys[params]

    generating = arch_key(module.Model.__init__, init)
    archs, skipped = _architectures(module, lowered, generating, verified, key_of, device, req["problem_path"])
    notes += skipped
    checked = {k for k in [generating, *map(key_of, [*verified, *([mine] if mine else [])])] if k is not None}
    shapes = [*every, *held.values(), *([mine] if mine else [])]
    for code_ in [lowered, *archs]:  # each code against the shapes of the modules it runs for
        runs = {code_["arch"]} if code_ is not lowered else checked - {a["arch"] for a in archs}
        _fixed_sizes(module, code_["asserted"], req["problem_path"], [w for w in shapes if key_of(w) in runs])
    if mine is not None:  # the held-out shape runs its module's own symbolic code where it has one
        key = key_of(mine)
        code_, here, suffix = next(((a, a["params"], f"_arch{i}") for i, a in enumerate(archs) if a["arch"] == key),
                                   (lowered, req["workload"], ""))
        notes += _same_code_elsewhere(module, code_, here, device, mine, req["problem_path"], suffix)
    static, skipped = _specialized(module, verified, device, req["problem_path"])
    for one in static:
        one["timed"] = any(w.name == one["workload"] for w in mine_set)
        one["arch"] = key_of(next(w for w in verified if w.name == one["workload"]))
    notes += skipped
    if device == "cuda":
        notes += _autotuned(module, [c for c in static if c["timed"]], mine_set, req["problem_path"])
    lowered["ops"] = sorted({*lowered["ops"], *(op for code in static + archs for op in code["ops"])})
    lowered.update(static=static, architectures=archs, modules=sorted(checked - {a["arch"] for a in archs}))
    lowered.update(returns="tensor" if isinstance(shape, torch.Tensor) else type(shape).__name__,
                   torch=torch.__version__, triton=triton.__version__, knobs=knobs, notes=notes)
    return lowered


def _specialized(module: Any, workloads: list[Any], device: str, where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(Inductor's code for each declared workload's sizes alone, as torch.compile's default dynamic=False runs it at
    that shape: its index arithmetic over constants, its choices (tiling, persistence, splits) for those sizes; a
    note per workload left out). Each is read like the dynamic code, its kernels named after the workload, with a
    `guard`: the conditions on forward's inputs under which it is the code to run (every tensor graph input's sizes,
    and strides where it is not made contiguous; every non-tensor argument of forward, whose value the code holds).
    Unreadable where two workloads take the same inputs and get other code: a module constant (an init argument)
    is built in, which the symbolic code holds too."""
    static: list[dict[str, Any]] = []
    notes: list[str] = []
    for w in workloads:
        try:
            model, inputs, args = _model_at(module, w, device, where)
            code, graph_inputs, n_outputs = capture(model, inputs, dynamic=False)
            read_ = read(code, graph_inputs, n_outputs, suffix=f"_{w.name}")
            bound = inspect.signature(model.forward).bind(*args).arguments
        except Exception as e:  # Unreadable, or the reference's own error at this workload
            notes.append(f"no code for {w.name}'s sizes alone ({type(e).__name__}: {str(e)[:200]}): the symbolic "
                         "code runs there")
            continue
        guard = []
        for expr, kind, sizes, strides in graph_inputs:
            if kind in ("tensor", "contiguous"):
                guard.append(f"tuple({expr}.shape) == ({''.join(f'{d}, ' for d in sizes)})")
                if kind == "tensor":
                    guard.append(f"{expr}.stride() == ({''.join(f'{d}, ' for d in strides)})")
        numbers = {name: value for name, value in bound.items() if isinstance(value, (bool, int, float))}
        if not all(math.isfinite(v) for v in numbers.values()):
            notes.append(f"no code for {w.name}'s sizes alone: forward takes a number that is not finite, which no "
                         "guard compares equal: the symbolic code runs there")
            continue
        guard += [f"{name} == {value!r}" for name, value in numbers.items()]
        static.append({**read_, "workload": w.name, "guard": guard})
    for a, b in ((a, b) for i, a in enumerate(static) for b in static[i + 1:]):
        if a["guard"] == b["guard"] and _unnamed(a) != _unnamed(b):
            raise Unreadable(f"workloads {a['workload']} and {b['workload']} take the same inputs, but Inductor writes "
                             "other code for them: a constant of the module that differs between them is built in, "
                             "so no one code is right at both")
    return static, notes


def _architectures(module: Any, symbolic: dict[str, Any], generating: str, workloads: list[Any],
                   key_of: Callable[[Any], str | None], device: str,
                   where: str) -> tuple[list[dict[str, Any]], list[str]]:
    """(the symbolic code again for each other module the workloads build (other init arguments) for which Inductor
    writes other code: a constant Dynamo specialized at the generating workload, such as a group count, is built into
    the symbolic code, which is then wrong for that module at any size, the held-out shape verify derives from that
    workload included; a note per module whose code cannot be had). Each has its kernels named `_archN` and `arch`,
    the key (ARCH_SOURCE, `key_of` a workload; `generating` the generating workload's) of the module's init
    arguments, under which forward runs it; none is timed."""
    seen = {generating}
    archs: list[dict[str, Any]] = []
    notes: list[str] = []
    for w in workloads:
        key = key_of(w)
        if key is None:
            notes.append(f"no symbolic code for {w.name}'s module: the reference's get_init_inputs fails there")
            continue
        if key in seen:
            continue
        seen.add(key)
        try:
            model, inputs, _ = _model_at(module, w, device, where)
            try:  # Dynamo holds an input size of 1 at 1: generated at 2 there, where the module takes it
                captured = capture(model, _without_ones(inputs))
            except Unreadable:
                captured = capture(model, inputs)
            if not _differ(symbolic, read(*captured)):
                continue
            archs.append({**read(*captured, suffix=f"_arch{len(archs)}"), "arch": key, "workload": w.name,
                          "params": w.params, "timed": False})
        except Exception as e:  # Unreadable, or the reference's own error at this workload
            notes.append(f"no symbolic code for {w.name}'s module ({type(e).__name__}: {str(e)[:200]}): the "
                         "symbolic code of the generating workload runs there")
    return archs, notes


def _without_ones(inputs: list[Any]) -> list[Any]:
    """The inputs with every size of 1 made 2 (contiguous), the others as they are."""
    import torch

    return [torch.empty([max(d, 2) for d in x.shape], dtype=x.dtype, device=x.device)
            if isinstance(x, torch.Tensor) and 1 in x.shape else x for x in inputs]


def _autotuned(module: Any, static: list[dict[str, Any]], workloads: list[Any], where: str) -> list[str]:
    """Put first, in each workload's kernels' configurations, the one Inductor's autotuner picks on this GPU (it
    times them at the kernel's first run: torch.compile's default at that shape, run once here on the workload's
    inputs); a note per workload or kernel whose pick is not known (its order stays Inductor's)."""
    from kernelflow.stages.problems.kernelbench import workload_call

    notes = []
    by_name = {w.name: w for w in workloads}
    for code in static:
        w = by_name[code["workload"]]
        try:
            picks = _picks(module, workload_call(module, w, "get_init_inputs", where),
                           workload_call(module, w, "get_inputs", where, device="cuda"))
        except Exception as e:  # the real compile or run fails here (memory): Inductor's order stays
            notes.append(f"{w.name}: the autotuner's picks are unknown ({type(e).__name__}: {str(e)[:200]}), "
                         "its kernels try Inductor's configurations in order")
            continue
        notes += first_picked(code["kernels"], picks, f"_{w.name}")
    return notes


def first_picked(kernels: list[dict[str, Any]], picks: dict[str, dict[str, Any]], suffix: str) -> list[str]:
    """Move each kernel's pick (by Inductor's kernel name, the kernel's without `suffix`) to the front of its
    configurations, adding it where Inductor's list lacks it; a note per kernel with more than one configuration
    and no pick."""
    notes = []
    for kernel in kernels:
        pick = picks.get(kernel["name"].removesuffix(suffix))
        if pick is None:
            if len(kernel["configs"]) > 1:
                notes.append(f"kernel {kernel['name']}: the autotuner's pick is unknown (the kernel did not run "
                             "under that name), its configurations are tried in Inductor's order")
            continue
        kernel["configs"] = [pick, *(c for c in kernel["configs"] if c != pick)]
    return notes


def _picks(module: Any, init: list[Any], inputs: list[Any]) -> dict[str, dict[str, Any]]:
    """{kernel name: the launch configuration it ran with} for one real run of torch.compile(Model) (dynamic=False,
    the process's Inductor choices) on `inputs`, on the GPU: after the autotuner's timing, where it had choices."""
    import torch
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    picks: dict[str, dict[str, Any]] = {}
    real_run = CachingAutotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        out = real_run(self, *args, **kwargs)
        if len(self.launchers) == 1:
            c = self.launchers[0].config
            picks[self.fn.__name__] = {"kwargs": dict(c.kwargs), "num_warps": int(c.num_warps),
                                       "num_stages": int(c.num_stages)}
        return out

    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = module.Model(*init).eval()
    CachingAutotuner.run = run  # type: ignore[method-assign]
    try:
        with torch.no_grad():
            torch.compile(model, dynamic=False, fullgraph=True)(*inputs)
        torch.cuda.synchronize()
    finally:
        CachingAutotuner.run = real_run  # type: ignore[method-assign]
    return picks


def _unnamed(code: dict[str, Any]) -> str:
    """A specialization's code without its workload's name."""
    return json.dumps({k: code[k] for k in _SHAPE_FREE}).replace(f"_{code['workload']}", "")


def _held_out_shape(module: Any, workloads: list[Any], declared: list[Any], where: str) -> tuple[Any, list[str]]:
    """(the first held-out shape of `workloads` at which the reference builds and runs on meta tensors, or None;
    a note per shape skipped before it): the shape verify checks the candidate at (stages/problems/held_out.py),
    as far as the reference's validity shows on meta tensors (verify also skips one where it is not finite or all
    zeros)."""
    from kernelflow.stages.problems.held_out import held_out_of

    notes: list[str] = []
    for _, h in held_out_of(module, workloads, declared):
        why = _reference_fails(module, h, where)
        if why is None:
            return h, notes
        notes.append(f"held-out shape {h.params}: skipped, the reference fails there ({why})")
    return None, notes


def _reference_fails(module: Any, workload: Any, where: str) -> str | None:
    """Why the reference cannot be built and run on meta tensors at `workload`, or None."""
    import torch

    from kernelflow.stages.problems.kernelbench import workload_call

    try:
        with torch.device("meta"):
            model = module.Model(*workload_call(module, workload, "get_init_inputs", where)).eval()
        inputs = workload_call(module, workload, "get_inputs", where, meta=True)
        with torch.no_grad(), torch.device("meta"):
            model(*inputs)
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return None


def _fixed_sizes(module: Any, asserted: dict[str, list[str]], where: str, checks: list[Any]) -> None:
    """Unreadable when the code holds a size fixed (Dynamo or Inductor specialized it: a LayerNorm's width, a conv's
    channels) that another declared workload, or the held-out shape verify derives from them, changes, among those
    that build a module the code runs for: such code runs at this shape only. Shapes come from the reference built
    on meta tensors at each of those workloads."""
    import inspect as inspect_

    import torch

    from kernelflow.stages.problems.kernelbench import workload_call

    fixed = {expr: {d: int(a) for d, a in enumerate(sizes) if a.isdigit()} for expr, sizes in asserted.items()}
    for w in checks:
        try:
            with torch.device("meta"):
                model = module.Model(*workload_call(module, w, "get_init_inputs", where))
            inputs = workload_call(module, w, "get_inputs", where, meta=True)
            scope = {"self": model, **inspect_.signature(model.forward).bind(*inputs).arguments}
        except Exception:  # the reference cannot be built on meta here: nothing to compare with
            continue
        for expr, dims in fixed.items():
            shape = eval(expr, {}, scope).shape
            for d, n in dims.items():
                if d < len(shape) and shape[d] != n:
                    raise Unreadable(f"Inductor's code holds {expr}.size()[{d}] at {n} (specialized), but workload "
                                     f"{w.name} {w.params} has {shape[d]}: it would run at this shape only")


_SHAPE_FREE = ("kernels", "prologue", "body", "launches", "outputs", "externs", "helpers")


def _code_at(module: Any, workload: Any, device: str, where: str, suffix: str = "") -> dict[str, Any]:
    """Inductor's code (read, its kernels named with `suffix`) for the module built at `workload`, from a fresh
    Dynamo."""
    model, inputs, _ = _model_at(module, workload, device, where)
    return read(*capture(model, inputs), suffix=suffix)


def _model_at(module: Any, workload: Any, device: str, where: str) -> tuple[Any, list[Any], list[Any]]:
    """(Model built at `workload` on `device` in eval mode, as the harness runs Model and ModelNew
    (stages/harness/instantiate.py), from a fresh Dynamo and seed 0; forward's inputs as empty tensors of the
    workload's sizes and strides on `device`; forward's arguments as get_inputs gives them on meta)."""
    import torch

    from kernelflow.stages.problems.kernelbench import workload_call

    torch._dynamo.reset()
    torch.manual_seed(0)
    with torch.device(device):
        model = module.Model(*workload_call(module, workload, "get_init_inputs", where)).eval()
    args = workload_call(module, workload, "get_inputs", where, meta=True)
    inputs = [torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device=device) if isinstance(x, torch.Tensor)
              else x for x in args]
    return model, inputs, args


def _differ(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The parts of two generations that differ, launch configurations aside."""
    def shape_free(code: dict[str, Any], key: str) -> Any:
        return [{**k, "configs": None} for k in code[key]] if key == "kernels" else code[key]

    return [k for k in _SHAPE_FREE if shape_free(a, k) != shape_free(b, k)]


def _same_code_elsewhere(module: Any, lowered: dict[str, Any], here_params: dict[str, Any], device: str,
                         other: Any, where: str, suffix: str = "") -> list[str]:
    """Unreadable when Inductor writes other code at `other`, the held-out shape verify derives on this device, than
    at `here_params`, where `lowered` was generated (launch configurations aside): a constant of the module (a
    group count, a width) or a size Dynamo specialized was built into the code, which would then run at this shape only. One difference is
    Inductor's own choice and no such constant: how many parts it splits a long reduction into, picked from the
    sizes it sees and written over the symbolic sizes (a ceil-divided part and a mask), so valid at any size. Where
    the two generations differ and are the same with split reductions off at both shapes, that is the difference:
    the code is kept, with a note (returned)."""
    import torch._inductor.config as inductor

    from kernelflow.stages.contracts import Workload

    try:
        there = _code_at(module, other, device, where, suffix)
    except Unreadable as e:
        raise Unreadable(f"at the held-out shape {other.params}: {e}") from e
    differ = _differ(there, lowered)
    if not differ:
        return []
    if inductor.split_reductions:
        here = Workload(name="inductor", params=here_params)
        with inductor.patch(split_reductions=False):
            try:
                unsplit = _differ(_code_at(module, here, device, where), _code_at(module, other, device, where))
            except Unreadable:
                unsplit = differ
        if not unsplit:
            return [f"Inductor splits a reduction otherwise at the held-out shape {other.params} (the parts' count is "
                    "its choice from the sizes it sees, over symbolic sizes); with split reductions off the code "
                    "is the same there"]
    raise Unreadable(f"Inductor writes other code ({', '.join(differ)}) at the held-out shape {other.params} than "
                     f"at {here_params}: a constant of the workload is built in, it would run at one shape only")


def main(argv: list[str]) -> int:
    """REQ RES: lower the request in REQ (JSON), write {"lowered": ...} or {"unreadable": reason} to RES; Inductor's
    scratch files go to a temporary directory that ends with the process."""
    import os
    import tempfile

    with open(argv[0]) as f:
        req = json.load(f)
    with tempfile.TemporaryDirectory(prefix="kf-inductor-") as scratch:
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = scratch
        os.environ["TRITON_CACHE_DIR"] = os.path.join(scratch, "triton")
        try:
            out: dict[str, Any] = {"lowered": lower(req)}
        except Unreadable as e:
            out = {"unreadable": str(e)}
        except Exception as e:  # the reference's own error (its constructor, get_inputs): data, not a crash
            out = {"unreadable": f"the reference fails before Inductor: {type(e).__name__}: {str(e)[:400]}"}
    with open(argv[1], "w") as f:
        json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
