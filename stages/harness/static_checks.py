"""Static checks: what no honest kernel's source contains (docs/INTEGRITY.md).

Each rule reads the candidate's text or syntax tree and returns its evidence (the words it matched) or None. A hit
fails the candidate as `cheat` before any of its code runs; compile, verify and benchmark all run the checks, since
a candidate may reach verify without a compile. The rules read intent, not behaviour: a name built from strings or
imported through importlib passes them, which is why the runtime defences (stages/harness/integrity.py, stages/harness/audit.py,
stages/harness/launches.py) exist. A source that does not parse is left to the import, which reports it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kernelflow.stages.contracts import Policy, Problem
from kernelflow.stages.errors import CandidateFault
from kernelflow.stages.harness.library_policy import ALWAYS

L2_PERSISTENCE = re.compile(r"AccessPolicyWindow|accessPolicyWindow|PersistingL2|cudaAccessPropertyPersisting|"
                            r"\bhitProp\b|persisting_l2|set_persisting")
TF32 = re.compile(r"allow_tf32\s*=\s*True|set_float32_matmul_precision\(\s*[\"'](high|medium)|"
                  r"input_precision\s*=\s*[\"']tf32|fp32_precision\s*=|reduced_precision_reduction\s*=\s*True|"
                  r"TRITON_F32_DEFAULT|CUBLAS_TF32_TENSOR_OP_MATH|CUBLAS_COMPUTE_32F_FAST|precision::tf32|"
                  r"__float_to_tf32|\.tf32\b")
HARNESS = re.compile(r"\bsys\._getframe\b|\binspect\.(currentframe|stack|getouterframes|trace)\b|\.f_back\b|"
                     r"\.f_locals\b|\.f_globals\b|\bgc\.get_(objects|referrers|referents)\b|"
                     r"\bsys\.(settrace|setprofile|addaudithook|modules)\b|\bthreading\.(settrace|setprofile)\b|"
                     r"\bkf_problem_|\bkf_cand_")
ATEN_OVERRIDE = re.compile(r"Library\(\s*[\"']aten[\"']|[\"']aten::|\.py_impl\(")
SECRET_FILES = re.compile(r"/proc/(self|\d+)/environ|\.aws/credentials|\.netrc\b|\.ssh/|\.docker/config|"
                          r"\.kube/config|\.git-credentials")
# env names that hold secrets (the stage environment has none: stages/executors/run.py scrubs them)
SECRET_NAME = re.compile(r"^[A-Z0-9_]*(KEY|SECRET|TOKEN|PASSW|CREDENTIAL)[A-Z0-9_]*$|^(OPENAI|AWS|AZURE|HF|"
                         r"ANTHROPIC|GITHUB|GOOGLE_APPLICATION)_[A-Z0-9_]*$")
HARNESS_PACKAGES = frozenset({"stages", "kernelflow", "artifacts", "flows"})
CANDIDATE_API = frozenset({"kernelflow.stages.backends.cutlass"})  # where a cute candidate finds the CUTLASS headers
NETWORK_PACKAGES = frozenset({"socket", "ssl", "urllib", "urllib3", "http", "requests", "httpx", "aiohttp",
                              "ftplib", "smtplib", "telnetlib", "xmlrpc", "websocket", "websockets", "paramiko",
                              "grpc", "zmq", "asyncio"})
WORKER_PACKAGES = frozenset({"threading", "_thread", "concurrent", "multiprocessing", "subprocess", "pty"})
WORKER_CALLS = re.compile(r"\bos\.(system|popen|fork|forkpty|exec\w*|spawn\w*|posix_spawn\w*)\s*\(")
# module-level names a candidate may not assign into: torch, Triton, the timer, the interpreter
PATCH_ROOTS = frozenset({"torch", "triton", "time", "os", "sys", "builtins", "math", "random", "numpy", "functools",
                         "gc", "importlib", "threading"})


@dataclass(frozen=True)
class Source:
    text: str
    tree: ast.Module | None
    dtype: str  # the problem's floating dtype ("float32" when unknown)
    policy: Policy

    def imports(self) -> Iterator[tuple[str, str]]:
        """(module imported, the name it is bound to) for every import statement."""
        for node in ast.walk(self.tree) if self.tree else ():
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield a.name, (a.asname or a.name).split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for a in node.names:
                    yield node.module, a.asname or a.name

    def bound_to(self, packages: frozenset[str]) -> set[str]:
        return {name for module, name in self.imports() if module.split(".")[0] in packages}


def _chain(node: ast.AST) -> str | None:
    """'torch.cuda.Event' for an attribute chain rooted at a plain name; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return ".".join([node.id, *reversed(parts)]) if isinstance(node, ast.Name) else None


def _regex(pattern: re.Pattern[str]) -> Callable[[Source], str | None]:
    def find(src: Source) -> str | None:
        m = pattern.search(src.text)
        return m.group(0) if m else None
    return find


def _imports_of(packages: frozenset[str], allowed: frozenset[str] = frozenset()) -> Callable[[Source], str | None]:
    def find(src: Source) -> str | None:
        return next((f"import {m}" for m, _ in src.imports() if m.split(".")[0] in packages and m not in allowed),
                    None)
    return find


def _harness(src: Source) -> str | None:
    return _regex(HARNESS)(src) or _imports_of(HARNESS_PACKAGES, CANDIDATE_API)(src)


def _tf32(src: Source) -> str | None:
    """TF32 a kernel asks for itself (tl.dot, cuBLAS modes, PTX) or a switch of torch's flags needs Policy.allow_tf32;
    Policy.conv_tf32 is cuDNN's, set by the harness (instantiate.set_precision), never by a candidate."""
    if src.policy.allow_tf32 or src.dtype not in ("float32", "float64"):
        return None
    return _regex(TF32)(src)


def _workers(src: Source) -> str | None:
    return _imports_of(WORKER_PACKAGES)(src) or _regex(WORKER_CALLS)(src)


def _secrets(src: Source) -> str | None:
    if found := _regex(SECRET_FILES)(src):
        return found
    if src.tree is None or not re.search(r"\benviron\b|\bgetenv\b", src.text):
        return None
    return next((repr(n.value) for n in ast.walk(src.tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
                 and SECRET_NAME.match(n.value)), None)


def _monkey_patch(src: Source) -> str | None:
    """An assignment (or setattr/delattr) into an attribute of torch, Triton, time, os, sys, ... (imported names)."""
    roots = src.bound_to(PATCH_ROOTS)
    for node in ast.walk(src.tree) if src.tree else ():
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign | ast.Delete):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign):
            targets = [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            targets = [ast.Attribute(value=node.args[0], attr="<name>")] if node.args else []
        for t in targets:
            for part in ast.walk(t) if isinstance(t, ast.Tuple | ast.List) else [t]:
                chain = _chain(part) if isinstance(part, ast.Attribute) else None
                if chain and chain.split(".")[0] in roots:
                    return f"{chain} = ..."
    return None


def _fallback(src: Source) -> str | None:
    """A torch op (or the reference's forward) in an except handler, where the policy forbids torch compute."""
    if src.policy.allow_torch_compute or src.tree is None:
        return None
    torch_names = src.bound_to(frozenset({"torch"})) | {"F"}
    for handler in (n for n in ast.walk(src.tree) if isinstance(n, ast.ExceptHandler)):
        for call in (n for n in ast.walk(handler) if isinstance(n, ast.Call)):
            chain = _chain(call.func) or ""
            if chain.split(".")[0] in torch_names and chain.split(".")[-1] not in ALWAYS | {"device", "dtype", "Size"}:
                return f"except: ... {chain}(...)"
            if isinstance(call.func, ast.Attribute) and call.func.attr == "forward":
                return "except: ... .forward(...)"
    return None


@dataclass(frozen=True)
class Rule:
    name: str
    find: Callable[[Source], str | None]
    reason: str


RULES = (
    Rule("l2_persistence", _regex(L2_PERSISTENCE), "sets aside persisting L2 cache, so data survives the flush "
         "between timed calls"),
    Rule("precision", _tf32, "switches fp32 math to TF32 or reduced precision, which this problem's policy forbids"),
    Rule("harness", _harness, "reaches into the harness (its frames, modules or objects), where only its inputs are "
         "the candidate's to read"),
    Rule("monkey_patch", _monkey_patch, "assigns into torch, Triton, the timer or the interpreter; the harness relies on "
         "them unchanged"),
    Rule("aten_override", _regex(ATEN_OVERRIDE), "registers its own implementation of a torch operator, which the "
         "reference would then run"),
    Rule("network", _imports_of(NETWORK_PACKAGES), "opens network connections"),
    Rule("secrets", _secrets, "reads secrets (credential files or secret-named environment variables)"),
    Rule("workers", _workers, "starts threads or processes, whose work can run outside the timed region and the "
         "harness's view"),
    Rule("fallback", _fallback, "falls back to torch ops when its kernel fails; the policy forbids torch compute, and "
         "the path verified need not be the path timed"),
)


def findings(source: str, problem: Problem | None = None, policy: Policy | None = None) -> list[str]:
    """'rule: reason (evidence)' for every rule the source breaks; empty when it breaks none."""
    try:
        tree: ast.Module | None = ast.parse(source)
    except (SyntaxError, ValueError):
        tree = None
    src = Source(source, tree, problem.dtype if problem else "float32",
                 policy or (problem.policy if problem else Policy()))
    return [f"{r.name}: {r.reason} (found `{found}`)" for r in RULES if (found := r.find(src)) is not None]


def check_source(source: str, problem: Problem | None = None, policy: Policy | None = None) -> None:
    """Raise CandidateFault('cheat') naming every rule the source breaks."""
    if hits := findings(source, problem, policy):
        raise CandidateFault("cheat", "static check: " + "; ".join(hits))
