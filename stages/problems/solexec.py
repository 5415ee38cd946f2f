"""SOL-ExecBench definitions as problems: definition.json + workload.jsonl translated into a KernelBench-style module.

The format is NVIDIA's SOL-ExecBench (github.com/NVIDIA/SOL-ExecBench, docs/definition.md and docs/workload.md),
which extends FlashInfer-Bench's trace schema:

- definition.json: `name`, `axes` (each `const` with a `value`, `var`, or `expr` with an arithmetic `expression`
  over other axes), `inputs` and `outputs` (name -> `shape`, a list of axis names or null for a Python scalar, and
  `dtype`), `reference` (Python source whose global `run(*inputs)` returns the outputs), and optionally
  `custom_inputs_entrypoint` (a function of the reference, `f(axes_and_scalars, device) -> {name: tensor}`) and
  `constraints` (boolean expressions over the axes);
- workload.jsonl: one workload per line, `uuid`, `axes` (a value for every var axis), `inputs` (name -> `random`,
  `scalar` with a `value`, `custom`, or `safetensors`), and optionally `correctness` (`max_atol`, `max_rtol`, ...).
  A FlashInfer trace line (`{"definition": ..., "workload": {...}}`) is read too.

`translate(dir)` checks all of it and writes an equivalent problem module (class Model calling the reference's
`run`, get_inputs / get_init_inputs, WORKLOADS, TOLERANCE) to the cache, content-addressed, so every stage loads it
with kernelflow.stages.problems.kernelbench.load_problem like any other problem file. docs/PROBLEMS.md ("SOL-ExecBench definitions")
says what maps to what and what is not supported.
"""

from __future__ import annotations

import ast
import hashlib
import json
import keyword
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelflow.stages.errors import ProblemError

TRANSLATOR_VERSION = "1"  # part of the cache key: a new translator writes new modules
CPU_MAX_ELEMENTS = 16384  # a workload goes to the cpu set when each of its inputs has at most this many elements
DTYPES = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1",
          "float4_e2m1fn_x2", "int64", "int32", "int16", "int8", "bool"}
RESERVED = {"self", "torch", "nn", "types", "a", "DEFINITION", "REFERENCE", "LINES", "INPUTS", "WORKLOADS",
            "TOLERANCE", "POLICY", "Model", "get_inputs", "get_init_inputs", "workload_line"}
INPUT_KINDS = {"random", "scalar", "custom", "safetensors"}
DEFAULT_CORRECTNESS = {"max_atol": 1e-2, "max_rtol": 1e-2}  # SOL-ExecBench's CorrectnessSpec defaults
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
_COMPARE = {ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b, ast.Lt: lambda a, b: a < b,
            ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b, ast.GtE: lambda a, b: a >= b}


def is_definition(path: str | Path) -> bool:
    """A SOL-ExecBench problem: a directory holding definition.json, or a definition.json file itself."""
    path = Path(path)
    return (path / "definition.json").is_file() if path.is_dir() else path.name == "definition.json"


def _directory(path: str | Path) -> Path:
    path = Path(path).resolve()
    return path.parent if path.name == "definition.json" else path


def translations_dir() -> Path:
    return Path(os.environ.get("KERNELFLOW_CACHE") or Path.home() / ".cache" / "kernelflow") / "solexec"


def resolve(path: str | Path, deferred: bool = False) -> str:
    """The problem file for `path`: a definition's translated module, or `path` itself when it is no definition.

    `deferred`: a broken definition gives a module whose import raises the reason instead of raising here, so that
    a campaign records it as that entry's failure (load_problem: "does not import: ...") and goes on."""
    if not is_definition(path):
        return str(path)
    try:
        return translate(path)
    except ProblemError as e:
        if not deferred:
            raise
        text = (f'"""A broken SOL-ExecBench definition; written by stages/problems/solexec.py."""\n\n'
                f'raise ValueError({str(e)!r})\n')
        return str(_write(text, _directory(path).name or "definition"))


def translate(path: str | Path) -> str:
    """Check the definition directory (or its definition.json) and return the path of its problem module."""
    folder = _directory(path)
    where = str(folder / "definition.json")
    definition = _json(where)
    workload_path = folder / "workload.jsonl"
    lines = _workload_lines(str(workload_path), definition.get("name"))
    text = module_source(where, definition, lines, str(workload_path))
    return str(_write(text, _identifier_name(definition["name"])))


def _write(text: str, stem: str) -> Path:
    """Content-addressed, so concurrent translations of one definition write the same file and never a half one."""
    target = translations_dir() / hashlib.sha256((TRANSLATOR_VERSION + text).encode()).hexdigest()[:16] / f"{stem}.py"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = target.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(text)
        scratch.replace(target)
    return target


def _json(where: str) -> dict:
    try:
        data = json.loads(Path(where).read_text())
    except OSError as e:
        raise ProblemError(where, f"cannot be read: {e}") from e
    except json.JSONDecodeError as e:
        raise ProblemError(where, f"is not JSON: {e}") from e
    if not isinstance(data, dict):
        raise ProblemError(where, "must be a JSON object")
    return data


def _workload_lines(where: str, name: Any) -> list[dict]:
    try:
        raw = Path(where).read_text().splitlines()
    except OSError as e:
        raise ProblemError(where, f"cannot be read (a definition needs its workload.jsonl beside it): {e}") from e
    lines = []
    for number, line in enumerate(raw, 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as e:
            raise ProblemError(where, f"line {number} does not parse: {e}") from e
        if isinstance(entry, dict) and isinstance(entry.get("workload"), dict):  # a FlashInfer trace line
            if entry.get("definition") not in (None, name):
                raise ProblemError(where, f"line {number} is for definition {entry['definition']!r}, not {name!r}")
            entry = entry["workload"]
        if not isinstance(entry, dict):
            raise ProblemError(where, f"line {number} is {type(entry).__name__}, not a JSON object")
        lines.append({**entry, "_line": number})
    if not lines:
        raise ProblemError(where, "holds no workload")
    return lines


def _identifier_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)


def _identifier(where: str, what: str, name: Any) -> str:
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise ProblemError(where, f"{what} {name!r} is not a usable Python name")
    if name in RESERVED:
        raise ProblemError(where, f"{what} {name!r} clashes with a name of the generated module ({sorted(RESERVED)})")
    return name


def _expression(where: str, text: Any, axes: set[str], what: str, compare: bool = False) -> ast.expr:
    """Parse and check an axis expression (or a constraint, with `compare`): integers, axis names, + - * / // % **,
    unary signs and parentheses; nothing else is ever evaluated."""
    if not isinstance(text, str):
        raise ProblemError(where, f"{what}: expression must be a string, not {text!r}")
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError as e:
        raise ProblemError(where, f"{what}: bad expression {text!r}: {e.msg}") from e
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in axes:
                raise ProblemError(where, f"{what}: expression {text!r} names unknown axis {node.id!r}")
        elif isinstance(node, ast.Constant):
            if not isinstance(node.value, int) or isinstance(node.value, bool):
                raise ProblemError(where, f"{what}: expression {text!r} has a non-integer constant {node.value!r}")
        elif not isinstance(node, (ast.BinOp, ast.UnaryOp, ast.Load, ast.UAdd, ast.USub, *_ARITHMETIC)) and not (
                compare and isinstance(node, (ast.Compare, *_COMPARE))):
            raise ProblemError(where, f"{what}: bad expression {text!r}: {type(node).__name__} is not arithmetic")
    if compare != isinstance(tree, ast.Compare):
        raise ProblemError(where, f"{what}: {text!r} must {'' if compare else 'not '}be a comparison")
    return tree


def _evaluate(node: ast.expr, values: dict[str, int]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return values[node.id]
    if isinstance(node, ast.UnaryOp):
        operand = _evaluate(node.operand, values)
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Compare):
        left, ok = _evaluate(node.left, values), True
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _evaluate(right_node, values)
            ok, left = ok and _COMPARE[type(op)](left, right), right
        return ok
    assert isinstance(node, ast.BinOp)
    a, b = _evaluate(node.left, values), _evaluate(node.right, values)
    ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b, ast.Div: lambda: a / b,
           ast.FloorDiv: lambda: a // b, ast.Mod: lambda: a % b, ast.Pow: lambda: a ** b}
    return ops[type(node.op)]()


def _as_python(node: ast.expr) -> str:
    """The checked expression as code over the generated module's `a` dict of axis values."""
    class Rename(ast.NodeTransformer):
        def visit_Name(self, name: ast.Name) -> ast.expr:
            return ast.Subscript(value=ast.Name(id="a", ctx=ast.Load()), slice=ast.Constant(name.id), ctx=ast.Load())

    return "int(" + ast.unparse(Rename().visit(node)) + ")"


class _Axes:
    """The definition's axes, checked: const values, var names, expr trees in an order that resolves."""

    def __init__(self, where: str, spec: Any):
        if not isinstance(spec, dict) or not spec:
            raise ProblemError(where, "`axes` must be a non-empty object of axis name -> {type: const|var|expr}")
        self.const: dict[str, int] = {}
        self.var: list[str] = []
        exprs: dict[str, ast.expr] = {}
        for name, axis in spec.items():
            _identifier(where, "axis", name)
            kind = axis.get("type") if isinstance(axis, dict) else None
            if kind == "const":
                value = axis.get("value")
                if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                    raise ProblemError(where, f"const axis {name!r} needs a positive integer `value`, not {value!r}")
                self.const[name] = value
            elif kind == "var":
                self.var.append(name)
            elif kind == "expr":
                exprs[name] = _expression(where, axis.get("expression"), set(spec), f"expr axis {name!r}")
            else:
                raise ProblemError(where, f"axis {name!r}: `type` must be const, var or expr, not {kind!r}")
        self.expr: dict[str, ast.expr] = {}
        while len(self.expr) < len(exprs):  # dependency order; a cycle never resolves
            ready = {n: e for n, e in exprs.items() if n not in self.expr and all(
                not isinstance(x, ast.Name) or x.id not in exprs or x.id in self.expr for x in ast.walk(e))}
            if not ready:
                cycle = sorted(set(exprs) - set(self.expr))
                raise ProblemError(where, f"expr axes refer to each other in a cycle: {cycle}")
            self.expr.update(ready)
        self.names = set(spec)

    def values(self, where: str, given: dict[str, int]) -> dict[str, int]:
        values = {**self.const, **given}
        for name, tree in self.expr.items():
            try:
                value = _evaluate(tree, values)
            except (ArithmeticError, ValueError, OverflowError) as e:
                raise ProblemError(where, f"expr axis {name!r} = {ast.unparse(tree)} fails: {e}") from e
            if isinstance(value, float) and value.is_integer():
                value = int(value)
            if not isinstance(value, int) or value <= 0:
                raise ProblemError(where, f"expr axis {name!r} = {ast.unparse(tree)} gives {value!r}, not a positive "
                                   "integer")
            values[name] = value
        return values


def _tensors(where: str, spec: Any, what: str, axes: _Axes) -> dict[str, tuple[list[str] | None, str]]:
    if not isinstance(spec, dict) or not spec:
        raise ProblemError(where, f"`{what}` must be a non-empty object of name -> {{shape, dtype}}")
    out = {}
    for name, tensor in spec.items():
        _identifier(where, what[:-1], name)
        if not isinstance(tensor, dict) or "shape" not in tensor or "dtype" not in tensor:
            raise ProblemError(where, f"{what[:-1]} {name!r} needs `shape` (list of axis names, or null) and `dtype`")
        shape, dtype = tensor["shape"], tensor["dtype"]
        if dtype not in DTYPES:
            raise ProblemError(where, f"{what[:-1]} {name!r} has unknown dtype {dtype!r}; known: {sorted(DTYPES)}")
        if shape is not None:
            if not isinstance(shape, list):
                raise ProblemError(where, f"{what[:-1]} {name!r}: shape must be a list of axis names or null")
            for dim in shape:
                if dim not in axes.names:
                    raise ProblemError(where, f"{what[:-1]} {name!r}: shape names unknown axis {dim!r}")
        out[name] = (shape, dtype)
    return out


def _correctness(where: str, spec: Any) -> tuple[float, float]:
    if spec is None:
        return DEFAULT_CORRECTNESS["max_atol"], DEFAULT_CORRECTNESS["max_rtol"]
    if not isinstance(spec, dict):
        raise ProblemError(where, f"`correctness` must be an object, not {spec!r}")
    values = {**DEFAULT_CORRECTNESS, **{k: v for k, v in spec.items() if k in DEFAULT_CORRECTNESS}}
    for key, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise ProblemError(where, f"correctness {key} = {value!r} is not a non-negative number")
    return float(values["max_atol"]), float(values["max_rtol"])


def module_source(where: str, definition: dict, lines: list[dict], workload_where: str) -> str:
    """Check the definition and its workloads; the problem module's text."""
    for field in ("name", "axes", "inputs", "outputs", "reference"):
        if field not in definition:
            raise ProblemError(where, f"missing field {field!r}")
    name = definition["name"]
    if not isinstance(name, str) or not name.strip():
        raise ProblemError(where, f"`name` must be a non-empty string, not {name!r}")
    axes = _Axes(where, definition["axes"])
    inputs = _tensors(where, definition["inputs"], "inputs", axes)
    outputs = _tensors(where, definition["outputs"], "outputs", axes)
    reference = definition["reference"]
    if not isinstance(reference, str):
        raise ProblemError(where, "`reference` must be Python source (a string)")
    try:
        tree = ast.parse(reference)
    except SyntaxError as e:
        raise ProblemError(where, f"`reference` does not parse: line {e.lineno}: {e.msg}") from e
    functions = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if "run" not in functions:
        raise ProblemError(where, "`reference` defines no global function run()")
    entrypoint = definition.get("custom_inputs_entrypoint")
    if entrypoint is not None and entrypoint not in functions:
        raise ProblemError(where, f"custom_inputs_entrypoint {entrypoint!r} is not a function of the reference")
    constraints = definition.get("constraints") or []
    if not isinstance(constraints, list):
        raise ProblemError(where, "`constraints` must be a list of comparisons over the axes")
    checks = [(c, _expression(where, c, axes.names, "constraint", compare=True)) for c in constraints]
    scalars = [n for n, (shape, _) in inputs.items() if shape is None]
    tensors = [n for n, (shape, _) in inputs.items() if shape is not None]
    if not tensors:
        raise ProblemError(where, "no tensor input: a problem's forward needs at least one tensor")

    workloads, tolerances, declared = [], [], False
    for line in lines:
        at = f"{workload_where} line {line['_line']}"
        given = line.get("axes")
        if not isinstance(given, dict):
            raise ProblemError(at, "missing `axes` (an object of var axis -> value)")
        for key, value in given.items():
            if key not in axes.var:
                raise ProblemError(at, f"axes: {key!r} is not a var axis of the definition (var axes: {axes.var})")
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ProblemError(at, f"axes: {key} = {value!r} is not a positive integer")
        if missing := [v for v in axes.var if v not in given]:
            raise ProblemError(at, f"axes: no value for var axis {', '.join(missing)}")
        values = axes.values(at, given)
        for text, check in checks:
            if not _evaluate(check, values):
                raise ProblemError(at, f"constraint {text!r} does not hold for axes {values}")
        kinds = line.get("inputs")
        if not isinstance(kinds, dict):
            raise ProblemError(at, "missing `inputs` (an object of input name -> {type: ...})")
        if unknown := sorted(set(kinds) - set(inputs)):
            raise ProblemError(at, f"inputs: {', '.join(unknown)} is not an input of the definition")
        line_kinds = {}
        for input_name in inputs:
            kind = kinds.get(input_name, {"type": "random"})
            kind_type = kind.get("type") if isinstance(kind, dict) else None
            if kind_type not in INPUT_KINDS:
                raise ProblemError(at, f"input {input_name!r}: type must be one of {sorted(INPUT_KINDS)}, not "
                                   f"{kind_type!r}")
            if kind_type == "safetensors":
                raise ProblemError(at, f"input {input_name!r}: safetensors inputs are not supported (kernelflow draws "
                                   "its inputs; docs/PROBLEMS.md)")
            is_scalar = inputs[input_name][0] is None
            if kind_type == "custom" and entrypoint is None:
                raise ProblemError(at, f"input {input_name!r}: custom inputs need the definition's "
                                   "custom_inputs_entrypoint")
            if kind_type == "custom" and is_scalar:
                raise ProblemError(at, f"input {input_name!r}: custom scalar (shape null) inputs are not supported")
            if (kind_type == "scalar") != is_scalar and kind_type != "custom":
                raise ProblemError(at, f"input {input_name!r}: a {'scalar (shape null)' if is_scalar else 'tensor'} "
                                   f"input cannot be {kind_type!r}")
            if kind_type == "scalar" and not isinstance(kind.get("value"), (int, float, bool)):
                raise ProblemError(at, f"input {input_name!r}: a scalar input needs a numeric `value`")
            line_kinds[input_name] = {"type": kind_type, **({"value": kind["value"]} if kind_type == "scalar" else {})}
        if len({k["type"] == "custom" for k in line_kinds.values()}) > 1:
            raise ProblemError(at, "inputs: custom inputs cannot be mixed with other kinds")
        tolerances.append(_correctness(at, line.get("correctness")))
        declared = declared or "correctness" in line
        sizes = [math.prod(values[d] for d in inputs[n][0] or []) for n in tensors]
        workloads.append(dict(uuid=str(line.get("uuid", "")), line=line["_line"], axes=dict(given), inputs=line_kinds,
                              small=max(sizes) <= CPU_MAX_ELEMENTS))
    tolerance = (min(a for a, _ in tolerances), min(r for _, r in tolerances)) if declared else None
    return _module(_Checked(name, definition, axes, inputs, outputs, scalars, tensors, entrypoint, workloads,
                            tolerance, where))


@dataclass(frozen=True)
class _Checked:
    """A definition and its workloads, checked: what its module is written from."""

    name: str
    definition: dict
    axes: _Axes
    inputs: dict  # name -> (shape axes or None for a scalar, dtype)
    outputs: dict
    scalars: list[str]  # inputs passed to the constructor
    tensors: list[str]  # inputs passed to forward
    entrypoint: str | None  # custom_inputs_entrypoint
    workloads: list[dict]
    tolerance: tuple[float, float] | None
    where: str  # the definition.json


def _module(checked: _Checked) -> str:
    name, definition, axes, inputs, outputs = (checked.name, checked.definition, checked.axes, checked.inputs,
                                               checked.outputs)
    scalars, tensors, entrypoint, workloads = checked.scalars, checked.tensors, checked.entrypoint, checked.workloads
    tolerance, where = checked.tolerance, checked.where
    first = workloads[0]
    described = (definition.get("description") or "").strip()
    signature = lambda names: ", ".join(["self", *names])  # noqa: E731
    shape = lambda n: "scalar" if inputs[n][0] is None else "[" + ", ".join(inputs[n][0]) + "]"  # noqa: E731
    out_shape = lambda n: "scalar" if outputs[n][0] is None else "[" + ", ".join(outputs[n][0]) + "]"  # noqa: E731
    gpu = [dict(workload_line=i + 1, **w["axes"]) for i, w in enumerate(workloads)]
    cpu = [dict(workload_line=i + 1, **w["axes"]) for i, w in enumerate(workloads) if w["small"]]
    parts = [
        f'"""SOL-ExecBench definition {name}, translated by kernelflow (stages/problems/solexec.py); do not edit.\n\n'
        f"From {Path(where).parent.name}/definition.json and the workload.jsonl beside it.\n"
        + (f"{described}\n" if described else "")
        + "Inputs: " + "; ".join(f"{n} {shape(n)} {inputs[n][1]}" for n in inputs) + ".\n"
        + "Outputs: " + "; ".join(f"{n} {out_shape(n)} {outputs[n][1]}" for n in outputs) + ".\n"
        + (f"Python scalars ({', '.join(scalars)}) are constructor arguments; tensors are forward's.\n"
           if scalars else "")
        + '"""\n',
        "import types\n\nimport torch\nimport torch.nn as nn\n",
        f"DEFINITION = {name!r}",
        f"REFERENCE = {definition['reference']!r}",
        f"_reference = types.ModuleType({'kf_solexec_reference_' + _identifier_name(name).replace('-', '_')!r})",
        "exec(compile(REFERENCE, f'<{DEFINITION} reference>', 'exec'), _reference.__dict__)\n",
        "# const axes",
        *[f"{a} = {v}" for a, v in axes.const.items()],
        "# var axes, at the first workload (WORKLOADS sets them); workload_line: the workload.jsonl entry in use",
        *[f"{a} = {first['axes'][a]}" for a in axes.var],
        "workload_line = 1",
        f"LINES = {[dict(uuid=w['uuid'], line=w['line'], inputs=w['inputs']) for w in workloads]!r}",
        f"INPUTS = {[(n, inputs[n][0], inputs[n][1]) for n in tensors]!r}  # tensor inputs: name, shape, dtype\n",
        "\ndef _axes():",
        "    a = {" + ", ".join(f"{n!r}: {n}" for n in [*axes.const, *axes.var]) + "}",
        *[f"    a[{n!r}] = {_as_python(t)}" for n, t in axes.expr.items()],
        "    return a\n",
        "\ndef _random(shape, dtype):",
        "    name, dtype = dtype, getattr(torch, dtype, None)",
        "    if dtype is None:",
        "        raise TypeError(f'this torch has no dtype {name}')",
        "    if dtype == torch.bool:",
        "        return torch.rand(shape) > 0.5",
        "    if not dtype.is_floating_point:",
        "        return torch.randint(0, 16, shape, dtype=dtype)",
        "    if dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):",
        "        return torch.randn(shape, dtype=dtype)",
        "    return torch.randn(shape).to(dtype)\n",
        "\ndef get_inputs():",
        "    a = _axes()",
        *(["    kinds = LINES[workload_line - 1]['inputs']",
           "    if any(k['type'] == 'custom' for k in kinds.values()):  # the reference's own generator",
           f"        made = _reference.{entrypoint}(a, torch.empty(0).device)",
           "        return [made[name] for name, _, _ in INPUTS]"] if entrypoint else []),
        "    return [_random([a[d] for d in shape], dtype) for _, shape, dtype in INPUTS]\n",
        "\ndef get_init_inputs():",
        "    kinds = LINES[workload_line - 1]['inputs']",
        f"    return [kinds[name]['value'] for name in {scalars!r}]\n",
        "\nclass Model(nn.Module):",
        f"    def __init__({signature(scalars)}):",
        "        super().__init__()",
        *[f"        self.{n} = {n}" for n in scalars],
        "",
        f"    def forward({signature(tensors)}):",
        "        return _reference.run(" + ", ".join(n if n in tensors else f"self.{n}" for n in inputs) + ")\n",
        "\nWORKLOADS = {",
        f"    'gpu': {gpu!r},",
        *([f"    'cpu': {cpu!r},"] if cpu else []),
        "}",
    ]
    if tolerance is not None:
        parts.append(f"TOLERANCE = {{'atol': {tolerance[0]!r}, 'rtol': {tolerance[1]!r}}}")
    return "\n".join(parts) + "\n"
