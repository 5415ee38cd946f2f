"""Deterministic parsing and repair of LLM replies into a candidate module.

parse_reply takes the candidate out of a reply: the reply's patch applied to the parent (SEARCH/REPLACE
blocks or a unified diff, stages/llm/patch.py), else the fenced Python block that defines ModelNew (else
the longest one), else a bare module. repair then fixes the slips that need no judgement: missing
imports, a misnamed ModelNew, a missing super().__init__(), mistyped Triton decorators. Each fix is
recorded in plain words; a reply with nothing usable raises ReplyError, a failed generation.
"""

from __future__ import annotations

import ast
import builtins
import re
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from kernelflow.stages.contracts import Contract
from kernelflow.stages.errors import KernelflowError
from kernelflow.stages.llm.patch import (
    PatchError,
    apply_search_replace,
    apply_unified_diff,
    fenced_blocks,
    find_patch,
)

ReplyKind = Literal["no_code", "truncated", "patch_failed", "no_model_new"]
PYTHON_FENCES = ("python", "py", "python3", "")
CPP_FENCES = ("cpp", "c++", "cxx", "c", "cuda", "cu")
IMPORTS = (  # (name the code uses without binding it, the import that binds it)
    ("torch", "import torch"),
    ("nn", "import torch.nn as nn"),
    ("F", "import torch.nn.functional as F"),
    ("triton", "import triton"),
    ("tl", "import triton.language as tl"),
    ("math", "import math"),
    ("load_inline", "from torch.utils.cpp_extension import load_inline"),
)
JIT_SLIPS = ("triton.jit()", "tl.jit", "tl.jit()", "triton.language.jit")
# An edit at ast positions: line, col, end line, end col (1-based lines, UTF-8 byte columns), new text
Edit = tuple[int, int, int, int, str]


class ReplyError(KernelflowError):
    """The reply holds no usable candidate; the proposer records it as a failed generation of this kind."""

    def __init__(self, kind: ReplyKind, message: str):
        self.kind, self.message = kind, message
        super().__init__(f"{kind}: {message}")


class Parsed(Contract):
    """The candidate module taken out of one LLM reply."""

    source: str = Field(description="the full candidate module after repairs")
    mode: Literal["module", "patch"] = Field(
        description="module: a full module from the reply; patch: the reply's patch applied to the parent"
    )
    repairs: list[str] = Field(description="one plain-words line per repair applied, in order")
    blocks_found: int = Field(description="fenced code blocks in the reply, of any language")


def parse_reply(
    text: str, backend: str, parent_source: str | None = None, finish_reason: str | None = None
) -> Parsed:
    """The candidate in `text`: a patch to `parent_source` when the reply holds one, else a full module."""
    blocks, left_open = fenced_blocks(text)
    if finish_reason == "length":
        raise ReplyError("truncated", "the reply stopped at the token limit (finish_reason 'length')")
    if left_open:
        raise ReplyError("truncated", "the reply ends inside an unterminated ``` code fence")
    patch = find_patch(text)
    if patch is not None:
        source, repairs = repair(_patched(parent_source, patch), backend)
        return Parsed(source=source, mode="patch", repairs=repairs, blocks_found=len(blocks))
    module, notes = _module(text, blocks)
    source, repairs = repair(module, backend)
    return Parsed(source=source, mode="module", repairs=notes + repairs, blocks_found=len(blocks))


def _patched(parent: str | None, patch: tuple[str, list[tuple[str, str]] | str]) -> str:
    if parent is None:
        raise ReplyError("patch_failed", "the reply is a patch but there is no parent source to apply it to")
    body = patch[1]
    try:
        if isinstance(body, str):
            return apply_unified_diff(parent, body)
        return apply_search_replace(parent, body)
    except PatchError as err:
        raise ReplyError("patch_failed", str(err)) from err


def _module(text: str, blocks: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """The Python block defining ModelNew, else the longest with a model class, else the longest; with no
    fence, the reply itself (or from its first import on) when it parses and defines a class."""
    python = [body for language, body in blocks if language in PYTHON_FENCES]
    if python:
        best = max(python, key=_rank)
        return _inline_cpp(best, [(lang, body) for lang, body in blocks if lang in CPP_FENCES])
    if blocks:
        languages = ", ".join(sorted({lang or "unlabelled" for lang, _ in blocks}))
        raise ReplyError("no_code", f"the reply has no Python code block (only: {languages})")
    lines = text.split("\n")
    first_import = next((i for i, line in enumerate(lines) if line.startswith(("import ", "from "))), 0)
    for source in (text, "\n".join(lines[first_import:])):
        try:
            if any(isinstance(node, ast.ClassDef) for node in ast.parse(source).body):
                return source, ["the reply had no code fence"]
        except SyntaxError:
            continue
    raise ReplyError("no_code", "the reply holds no code block and does not parse as a Python module")


def _rank(block: str) -> tuple[bool, bool, int]:
    classes = _model_classes(block)
    return "ModelNew" in classes, bool(classes), len(block)


def _model_classes(source: str) -> list[str]:
    """Top-level classes with a forward(self, ...), in order; by regex when the source does not parse."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return re.findall(r"^class\s+(\w+)", source, re.MULTILINE) if "def forward(self" in source else []
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef) and _has_forward(node)]


def _has_forward(cls: ast.ClassDef) -> bool:
    """A forward(self, ...) method: an nn.Module's, not an autograd.Function's forward(ctx, ...)."""
    methods = (f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "forward")
    return any(f.args.args and f.args.args[0].arg == "self" for f in methods)


def _inline_cpp(source: str, cpp: list[tuple[str, str]]) -> tuple[str, list[str]]:
    """Assign C++/CUDA blocks to the *source*/*src*/*code* names the Python uses without defining them."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, []  # repair reports the syntax error
    missing = [name for name in _unbound(tree) if re.search(r"source|src|code", name, re.IGNORECASE)]
    assignments, notes, remaining = [], [], list(cpp)
    for name in missing[: len(cpp)]:
        kernel_name = "cpp" not in name.lower()  # cuda_source holds the kernels, cpp_source the declarations
        language, body = next((b for b in remaining if ("__global__" in b[1]) == kernel_name), remaining[0])
        remaining.remove((language, body))
        quote = next((q for q in ('"""', "'''") if q not in body), None)
        assignments.append(f"{name} = {f'r{quote}{body}{quote}' if quote else repr(body)}\n")
        notes.append(f"inlined the ```{language} block as `{name}` (the Python used it without defining it)")
    at = _header_end(tree) + 1
    return _apply(source, [(at, 0, at, 0, "".join(assignments))]) if assignments else source, notes


def repair(source: str, backend: str) -> tuple[str, list[str]]:
    """Fix the slips that need no judgement, one plain-words line per fix; Triton decorator fixes only for
    the triton backend. Raises ReplyError when the source does not parse or has no class with a forward."""
    source = source if source.endswith("\n") else source + "\n"
    fixes: list[Callable[[ast.Module, str], tuple[str, list[str]]]] = [_rename_model_new, _add_super_init]
    fixes = ([_fix_decorators] if backend == "triton" else []) + fixes + [_add_imports]
    repairs: list[str] = []
    for fix in fixes:
        source, done = fix(_parse(source), source)
        repairs += done
    _parse(source)
    return source, repairs


def _parse(source: str) -> ast.Module:
    try:
        return ast.parse(source)
    except SyntaxError as err:
        raise ReplyError("no_code", f"the code does not parse: {err.msg} (line {err.lineno})") from err


def _span(node: ast.expr | ast.stmt) -> tuple[int, int, int, int]:
    return node.lineno, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0


def _apply(source: str, edits: list[Edit]) -> str:
    """Apply non-overlapping edits at ast positions (columns are UTF-8 byte offsets), last first."""
    data = source.encode()
    starts = [0] + [i + 1 for i, byte in enumerate(data) if byte == 10]
    for line, col, end_line, end_col, new in sorted(edits, reverse=True):
        data = data[: starts[line - 1] + col] + new.encode() + data[starts[end_line - 1] + end_col :]
    return data.decode()


def _fix_decorators(tree: ast.Module, source: str) -> tuple[str, list[str]]:
    edits: list[Edit] = []
    notes = []
    for fn in (node for node in tree.body if isinstance(node, ast.FunctionDef)):
        for deco in fn.decorator_list:
            if ast.unparse(deco) in JIT_SLIPS:
                edits.append((*_span(deco), "triton.jit"))
                notes.append(f"changed `@{ast.unparse(deco)}` to `@triton.jit` on {fn.name}")
        pids = (n for n in ast.walk(fn) if isinstance(n, ast.Attribute) and n.attr == "program_id")
        uses_pid = any(ast.unparse(n) == "tl.program_id" for n in pids)
        if uses_pid and not fn.decorator_list:
            edits.append((fn.lineno, 0, fn.lineno, 0, "@triton.jit\n"))
            notes.append(f"added `@triton.jit` to {fn.name} (it uses tl.program_id but had no decorator)")
    return _apply(source, edits), notes


def _rename_model_new(tree: ast.Module, source: str) -> tuple[str, list[str]]:
    top_names = {n.name for n in tree.body if isinstance(n, ast.ClassDef)} | {
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    }
    if "ModelNew" in top_names:
        return source, []
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and _has_forward(n)]
    if not classes:
        raise ReplyError("no_model_new", "the code defines neither ModelNew nor a class with a forward(self)")
    cls = classes[-1]
    header = source.encode().split(b"\n")[cls.lineno - 1]
    match = re.compile(rb"class\s+" + cls.name.encode() + rb"\b").search(header, cls.col_offset)
    assert match is not None  # the class statement is on the line ast names
    edits = [(cls.lineno, match.end() - len(cls.name.encode()), cls.lineno, match.end(), "ModelNew")]
    edits += [(*_span(n), "ModelNew") for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == cls.name]
    among = f" (the last of {len(classes)} classes with a forward)" if len(classes) > 1 else ""
    return _apply(source, edits), [f"renamed class {cls.name} to ModelNew{among}"]


def _add_super_init(tree: ast.Module, source: str) -> tuple[str, list[str]]:
    """Insert super().__init__() into a module class's __init__ that never calls a base __init__."""
    edits: list[Edit] = []
    notes = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        if not (_has_forward(cls) or any(ast.unparse(base).endswith("Module") for base in cls.bases)):
            continue
        init = next((f for f in cls.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
        if init is None or any(isinstance(n, ast.Attribute) and n.attr == "__init__" for n in ast.walk(init)):
            continue
        first = init.body[0]
        if first.lineno == init.lineno:
            continue  # a one-line `def __init__(self): ...` has no line to insert before
        line = (first.end_lineno or first.lineno) + 1 if ast.get_docstring(init) is not None else first.lineno
        edits.append((line, 0, line, 0, " " * first.col_offset + "super().__init__()\n"))
        notes.append(f"inserted `super().__init__()` at the start of {cls.name}.__init__")
    return _apply(source, edits), notes


def _add_imports(tree: ast.Module, source: str) -> tuple[str, list[str]]:
    unbound = set(_unbound(tree))
    statements = [statement for name, statement in IMPORTS if name in unbound]
    if not statements:
        return source, []
    at = _header_end(tree) + 1
    added = "".join(s + "\n" for s in statements)
    return _apply(source, [(at, 0, at, 0, added)]), [f"added `{s}`" for s in statements]


def _header_end(tree: ast.Module) -> int:
    """The last line of the leading docstring and imports (0 when the module starts otherwise)."""
    end = 0
    for i, node in enumerate(tree.body):
        docstring = i == 0 and ast.get_docstring(tree) is not None
        if not (docstring or isinstance(node, ast.Import | ast.ImportFrom)):
            break
        end = node.end_lineno or node.lineno
    return end


def _unbound(tree: ast.Module) -> list[str]:
    """Names loaded but bound nowhere in the module (scopes ignored), in order of first use."""
    bound = set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    loads = [n for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]
    first_use = sorted(loads, key=lambda n: (n.lineno, n.col_offset))
    return list(dict.fromkeys(n.id for n in first_use if n.id not in bound))
