"""Family `inductor`: torch.compile's own code for the reference, as a self-contained candidate.

Inductor lowers the problem's Model for the run's device with dynamic shapes, and again for each declared workload
verify runs on the device (on cuda the CPU set's too: the symbolic code holds the module constants of the workload
it was generated at) with that workload's sizes alone, as torch.compile's default (dynamic=False) runs it there,
and with dynamic shapes again for each other module (init arguments) of those workloads whose code differs
(stages/templates/inductor_output.py, the one file that knows Inductor's output, run in a process of its own);
this family writes what it read as a module: each generated kernel a plain @triton.jit function launched by
`_kf_launch` on the grid Inductor would compute, the wrapper's allocations and views as torch calls, vendor
GEMM/conv calls as Inductor made them. forward runs a workload's own code where its guard holds (the inputs' sizes,
read in a few comparisons), else the symbolic code, which runs at any size (verify's held-out shape checks it). No
Dynamo, autotuner or torch._inductor import at run time; a module whose init arguments (`_kf_arch`, kept by
__init__) are those of such a module runs its symbolic code. Code runs only for the modules it was generated and
checked for (the generating workload's, the verified workloads', the held-out shape's): a workload's own code for
its own module, a module built with other init arguments is a ValueError naming them. ModelNew subclasses the
reference, so it takes Model's init arguments and loads Model's state; forward reads the parameters and buffers
from the module.

Parameters:
- per kernel K (a workload's own kernels are named after it, `..._gpu0`), its launch configuration: `K.XBLOCK`
  (and YBLOCK, ZBLOCK, R0_BLOCK where the kernel has them), `K.num_warps`, `K.num_stages`. The variants take
  Inductor's own candidate configurations (the ones its autotuner would time), the first of each kernel first: on
  cuda, a workload's kernel starts with the configuration Inductor's autotuner picked on this GPU at generation;
  the search's moves then change one kernel's value at a time (stages/proposers/mutations.py: a coordinate descent
  over launch configurations, what Inductor's coordinate_descent_tuning does at run time).
- Inductor's code-generation choices (inductor_output.KNOBS): split_reductions, aggressive_fusion,
  prefer_nd_tiling, persistent_reductions; on cuda max_autotune (GEMM/conv templates, timed by Inductor on this
  GPU) and triton_gemm (templates only, no vendor call: what a policy without vendor libraries needs); allow_tf32
  (TF32 dots in GEMM and conv templates) only where the policy allows TF32 (Policy.allow_tf32; conv_tf32 is cuDNN's
  alone). A variant whose choices differ from the plan's is generated when rendered.
- `torch`, `triton`: the versions the code was generated with (a record; kernelflow export names them).

A vendor call (extern mm/addmm/bmm/convolution) the policy forbids makes the variant a TemplateMismatch naming the
op; so does any other torch op Inductor left as a fallback when the policy forbids torch compute, and code that
launches no generated kernel (a plain GEMM's extern mm: eager's call, not a candidate; on cuda the plan then takes
the Triton templates). A reference that Dynamo or Inductor cannot compile, or code the reader does not understand,
is a TemplateMismatch with the reason.

Generation takes seconds; each result (or its reason) is kept on disk, keyed by the problem's source, the
workload, the device (and GPU), the choices and the torch/Triton/Python versions, under $KERNELFLOW_CACHE/inductor
(default ~/.cache/kernelflow/inductor), written atomically under a per-key file lock, so processes share it.
"""

from __future__ import annotations

import ast
import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelflow.stages.contracts import Device, Policy, Problem, Workload
from kernelflow.stages.harness.library_policy import forbidden, op_class
from kernelflow.stages.lifetime import die_with_parent
from kernelflow.stages.templates import interpreted_libdevice, launch
from kernelflow.stages.templates.inductor_output import ARCH_SOURCE, FORMAT, KNOBS
from kernelflow.stages.templates.program import TemplateMismatch
from kernelflow.stages.templates.source import HEADER, reference_source

TARGETED = True  # match takes the device candidates are generated for (stages/proposers/builtin.py)
LOWER_S = 600  # one Inductor generation, at most (max_autotune times GEMM choices on the GPU)
VARIANTS = 8  # launch-configuration variants of the plan's code, at most
_memo: dict[str, dict[str, Any]] = {}


@dataclass(frozen=True)
class Plan:
    """What the family matched: Inductor's code for the plan's choices, and how to generate more."""

    problem: Problem
    device: Device
    workload: Workload
    knobs: dict[str, bool]
    lowered: dict[str, Any] = field(repr=False)
    reference: str = field(repr=False)


def cache_dir() -> Path:
    return Path(os.environ.get("KERNELFLOW_CACHE") or Path.home() / ".cache" / "kernelflow") / "inductor"


def _device_id(device: Device) -> str:
    if device == "cpu":
        return "cpu"
    import torch

    major, minor = torch.cuda.get_device_capability()
    return f"{torch.cuda.get_device_name()} sm_{major}{minor}"


def _workload(problem: Problem, device: Device) -> Workload:
    """The workload Inductor sees: the device's, preferring one with fewest sizes of 1 (Dynamo fixes those)."""
    workloads = problem.gpu_workloads if device == "cuda" else (problem.cpu_workloads or problem.gpu_workloads)
    return min(workloads, key=lambda w: sum(v == 1 for v in w.params.values()))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def verified_sets(device: Device, sizes: str) -> list[str]:
    """The size sets verify runs candidates at on the device, each of which gets its own code: on cuda both (the
    CPU set's small shapes too), on the CPU the generation's own."""
    return ["gpu", "cpu"] if device == "cuda" else [sizes]


def _generate(problem: Problem, device: Device, workload: Workload, knobs: dict[str, bool]) -> dict[str, Any]:
    """inductor_output.main in a process of its own: {"lowered": ...} or {"unreadable": reason}; a process that
    crashes or runs past LOWER_S gives the reason, {"transient": True} for the latter (not kept)."""
    with tempfile.TemporaryDirectory(prefix="kf-inductor-") as tmp:
        path = Path(tmp) / f"kf_problem_{problem.id.replace('-', '_')}.py"
        path.write_text(problem.source)
        req, res = Path(tmp) / "req.json", Path(tmp) / "res.json"
        declared = {"gpu": [w.params for w in problem.gpu_workloads], "cpu": [w.params for w in problem.cpu_workloads]}
        sizes = "gpu" if device == "cuda" or not problem.cpu_workloads else "cpu"
        req.write_text(json.dumps({"problem_path": str(path), "workload": workload.params, "device": device,
                                   "knobs": knobs, "workloads": declared, "sizes": sizes,
                                   "verified": verified_sets(device, sizes)}))
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        try:
            parent = os.getpid()
            done = subprocess.run([sys.executable, "-m", "kernelflow.stages.templates.inductor_output", str(req),
                                   str(res)], env=env, capture_output=True, text=True, timeout=LOWER_S,
                                  preexec_fn=lambda: die_with_parent(parent))
        except subprocess.TimeoutExpired:
            return {"unreadable": f"Inductor did not finish within {LOWER_S} s", "transient": True}
        if done.returncode != 0 or not res.exists():
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            return {"unreadable": f"Inductor's process ended with status {done.returncode}: {tail}"}
        return json.loads(res.read_text())


def lowered(problem: Problem, device: Device, workload: Workload, knobs: dict[str, bool]) -> dict[str, Any]:
    """Inductor's code for these choices, from the cache or generated; TemplateMismatch with the reason."""
    import torch
    import triton

    identity = [FORMAT, problem.source_sha256, workload.params, device, _device_id(device), sorted(knobs.items()),
                torch.__version__, triton.__version__, sys.version_info[:2]]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:32]
    if key not in _memo:
        path = cache_dir() / f"{key}.json"
        with _locked(path.with_suffix(".lock")):
            if path.exists():
                out = json.loads(path.read_text())
            else:
                out = _generate(problem, device, workload, knobs)
                if not out.get("transient"):
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(json.dumps(out))
                    os.replace(tmp, path)
        _memo[key] = out
    out = _memo[key]
    if "lowered" not in out:
        raise TemplateMismatch(f"Inductor: {out['unreadable']}")
    return out["lowered"]


def _allowed(code: dict[str, Any], policy: Policy) -> None:
    """TemplateMismatch naming the torch ops outside kernels that the policy forbids."""
    bad = forbidden(dict.fromkeys(code["ops"], 1), policy)
    if bad:
        kinds = {"vendor": "cuBLAS/cuDNN calls", "compute": "torch compute ops"}
        why = ", ".join(f"{op} ({kinds.get(op_class(op), op_class(op))})" for op in sorted(bad))
        raise TemplateMismatch(f"Inductor's code calls {why}, which the problem's policy forbids")


def _usable(code: dict[str, Any], policy: Policy) -> dict[str, Any]:
    """The code, or TemplateMismatch: it calls what the policy forbids (_allowed), or it launches no kernel of its
    own (its calls are eager's)."""
    _allowed(code, policy)
    if not any(c["kernels"] for c in _codes(code)):
        raise TemplateMismatch(f"Inductor's code launches no generated kernel, only {', '.join(code['ops'])} "
                               "(eager's own calls)")
    return code


def match(problem: Problem, traced: Any, device: Device) -> Plan:
    """Inductor's code for the device with its default choices; where the policy forbids the vendor calls it
    makes, or they are all it makes, on cuda, the choice of Triton GEMM/conv templates instead. `traced` is not
    needed."""
    workload = _workload(problem, device)
    knobs = dict(KNOBS)
    code = lowered(problem, device, workload, knobs)
    try:
        _usable(code, problem.policy)
    except TemplateMismatch:
        if device != "cuda" or not any(op_class(op) == "vendor" for op in code["ops"]):
            raise
        knobs = {**knobs, "max_autotune": True, "triton_gemm": True}
        code = _usable(lowered(problem, device, workload, knobs), problem.policy)
    return Plan(problem, device, workload, knobs, code, reference_source(problem.source))


def _codes(code: dict[str, Any]) -> list[dict[str, Any]]:
    """The code for each declared workload's sizes alone, the symbolic code for each other module (init arguments)
    it differs for, then the symbolic code (any other sizes)."""
    return [*code.get("static", []), *code.get("architectures", []), code]


def _launch_params(code: dict[str, Any], index: int) -> dict[str, Any]:
    """Each kernel's configuration number `index` (its last one where it has fewer), but a workload's code that is
    verified and not timed (the CPU set's on cuda), whose kernels run with their first configuration."""
    params: dict[str, Any] = {}
    for kernel in (k for c in _codes(code) if c.get("timed", True) for k in c["kernels"]):
        config = kernel["configs"][min(index, len(kernel["configs"]) - 1)]
        params.update({f"{kernel['name']}.{k}": v for k, v in config["kwargs"].items() if k in kernel["tunable"]})
        params.update({f"{kernel['name']}.num_warps": config["num_warps"],
                       f"{kernel['name']}.num_stages": config["num_stages"]})
    return params


def _flips(plan: Plan) -> list[dict[str, bool]]:
    """Choices worth a regeneration: each a change of one knob (two for TF32 templates)."""
    names = [k["name"] for k in plan.lowered["kernels"]]
    reduces = any("_red_" in n or "_per_" in n for n in names)
    vendor = any(op_class(op) == "vendor" for op in plan.lowered["ops"])
    flips = []
    if reduces:
        flips += [{"split_reductions": not plan.knobs["split_reductions"]},
                  {"persistent_reductions": not plan.knobs["persistent_reductions"]}]
    if len(names) > 1:
        flips.append({"aggressive_fusion": not plan.knobs["aggressive_fusion"]})
    if any("_poi_" in n for n in names):
        flips.append({"prefer_nd_tiling": not plan.knobs["prefer_nd_tiling"]})
    if plan.device == "cuda" and vendor and not plan.knobs["max_autotune"]:
        flips.append({"max_autotune": True})
        if plan.problem.policy.allow_tf32:
            flips.append({"max_autotune": True, "allow_tf32": True})
    return [{**plan.knobs, **flip} for flip in flips]


def variants(plan: Plan) -> list[dict[str, Any]]:
    code = plan.lowered
    record = {"torch": code["torch"], "triton": code["triton"]}
    most = max((len(k["configs"]) for c in _codes(code) for k in c["kernels"]), default=1)
    launches = [_launch_params(code, i) for i in range(min(most, VARIANTS))]
    out = [{**plan.knobs, **launch_, **record} for launch_ in launches]
    out += [{**knobs, **record} for knobs in _flips(plan)]
    return out


def _code_for(plan: Plan, params: dict[str, Any]) -> dict[str, Any]:
    knobs = {k: bool(params.get(k, v)) for k, v in plan.knobs.items()}
    if knobs == plan.knobs:
        return plan.lowered
    return _usable(lowered(plan.problem, plan.device, plan.workload, knobs), plan.problem.policy)


def _launch(code: dict[str, Any], launch_: dict[str, Any], params: dict[str, Any]) -> list[str]:
    """The forward's lines for one launch: the grid's names bound, then the launch."""
    kernel = code["kernels"][launch_["kernel"]]
    name, positional, args = kernel["name"], kernel["positional"], launch_["args"]
    first = kernel["configs"][0]
    lines = [f"{n} = {args[positional.index(n)]}" for n in ("xnumel", "ynumel", "znumel", "r0_numel", "r1_numel")
             if n in positional and any(n in d for d in kernel["grid"]["dims"] + kernel["grid"]["prefix"])]
    lines += [f"{n} = {args[len(positional) + i]}" for i, n in enumerate(kernel["extra_args"])]
    meta = {k: int(params.get(f"{name}.{k}", first["kwargs"][k])) for k in kernel["tunable"]}
    lines += [f"{k} = {v}" for k, v in meta.items()]
    lines += kernel["grid"]["prefix"]
    keywords = [f"{k}={k}" for k in meta] + [f"{k}={v}" for k, v in kernel["fixed"].items()]
    keywords += [f"{k}={int(params.get(f'{name}.{k}', first[k]))}" for k in ("num_warps", "num_stages")]
    grid = f"({', '.join(kernel['grid']['dims'])})"
    lines.append(launch.call(name, grid, ", ".join(args[:len(positional)] + keywords)))
    return lines


def _signature(problem_source: str) -> str:
    tree = ast.parse(problem_source)
    model = next(s for s in tree.body if isinstance(s, ast.ClassDef) and s.name == "Model")
    forward = next((s for s in model.body if isinstance(s, ast.FunctionDef) and s.name == "forward"), None)
    if forward is None:
        raise TemplateMismatch("Model defines no forward of its own")
    return ast.unparse(forward.args)


def _branch(code: dict[str, Any], returns: str, params: dict[str, Any]) -> list[str]:
    """One code's statements in forward, to its return."""
    body = list(code["prologue"])
    for line in code["body"]:
        if line.startswith("_kf_launch_marker("):
            body += _launch(code, code["launches"][int(line[len("_kf_launch_marker("):-1])], params)
        else:
            body.append(line)
    outputs = code["outputs"]
    ret = {"tensor": outputs[0], "tuple": f"({', '.join(outputs)},)", "list": f"[{', '.join(outputs)}]"}[returns]
    return body + [f"return {ret}"]


def render(plan: Plan, params: dict[str, Any]) -> str:
    """The module: forward runs the code for a declared workload's sizes where its guard holds (as torch.compile
    runs code specialized to the shape it sees), else the symbolic code, which runs at any size."""
    code = _code_for(plan, params)
    archs = code.get("architectures", [])
    known = sorted({*code["modules"], *(arch["arch"] for arch in archs)})
    lines = ["if self._kf_arch not in _KF_MODULES:",
             "    raise ValueError('this kernel was generated and checked for modules built with the init arguments '",
             "                     + ' or '.join(_KF_MODULES) + '; this one was built with ' + self._kf_arch",
             "                     + ': run kernelflow on a workload whose get_init_inputs builds it')"]
    for static in code.get("static", []):
        guard = [f"self._kf_arch == {static['arch']!r}", *static["guard"]]
        lines.append(f"if {' and '.join(guard)}:  # {static['workload']}'s sizes")
        lines += ["    " + line for line in _branch(static, code["returns"], params)]
    for arch in archs:
        lines.append(f"if self._kf_arch == {arch['arch']!r}:  # {arch['workload']}'s module, any sizes")
        lines += ["    " + line for line in _branch(arch, code["returns"], params)]
    lines += _branch(code, code["returns"], params)
    forward = "\n".join("        " + line for line in lines)
    init = ("    def __init__(self, *args, **kwargs):\n        super().__init__(*args, **kwargs)\n"
            "        self._kf_arch = _kf_arch(_Reference.__init__, args, kwargs)\n\n")
    model_new = f"class ModelNew(_Reference):\n{init}    def forward({_signature(plan.problem.source)}):\n{forward}\n"
    header = HEADER + f"import math\nimport {code['libdevice']} as libdevice\nimport {code['tl_math']} as tl_math\n" \
        "\naten = torch.ops.aten\n"
    interpreted = f"{interpreted_libdevice.SOURCE}\n\nif triton.knobs.runtime.interpret:  # CPU checks only\n" \
        "    libdevice = _KfInterpretedLibdevice()\n"
    note = (f"# Inductor's code (torch {code['torch']}, Triton {code['triton']}) for {plan.device}, "
            f"generated at {plan.workload.name} {plan.workload.params} with symbolic sizes, and for "
            f"{', '.join(c['workload'] for c in code.get('static', [])) or 'no workload'}'s sizes alone, "
            f"choices {code['knobs']}\n")
    note += "".join(f"# {line}\n" for line in code.get("notes", []))  # held-out shapes skipped, and why
    kernels = [k["source"] for c in _codes(code) for k in c["kernels"]]
    helpers = dict.fromkeys(h for c in _codes(code) for h in [*c["helpers"], *c["externs"]])
    modules = f"_KF_MODULES = {tuple(known)!r}  # the init arguments (_kf_arch) the code was checked for\n"
    helpers[f"{ARCH_SOURCE}\n\n{modules}"] = None
    return "\n\n".join([note + header, launch.SOURCE, interpreted, *helpers, *kernels, plan.reference, model_new])
