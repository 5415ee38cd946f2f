"""Family `inductor`: torch.compile's code for the reference as a self-contained candidate. On the CPU Inductor writes
Triton through its CPU backend, stopped before compiling; the rendered module verifies through the real verify
stage in Triton's interpreter (held-out shape and census included), for kinds no other family takes. What Dynamo or
Inductor cannot compile, and what the policy forbids, is a TemplateMismatch with the reason. The cuda path runs
only where a GPU is (test_cuda_*): the same generation for the GPU, compiled and verified there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import triton

from kernelflow import export
from kernelflow.stages import generate
from kernelflow.stages.contracts import Action, Candidate, GenerateRequest, Origin, Problem, VerifyRequest
from kernelflow.stages.executors.run import run_stage
from kernelflow.stages.harness.candidate import load_model_class
from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.proposers import mutations
from kernelflow.stages.templates import TEMPLATES, inductor, inductor_output
from kernelflow.stages.templates.program import TemplateMismatch

ROOT = Path(__file__).resolve().parents[3]
FAMILY = TEMPLATES["inductor"]
SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

batch, mid, cols = 3, 6, 5
{constants}

class Model(nn.Module):
    def __init__(self, {init_args}):
        super().__init__()
        {init}

    def forward(self, x):
        {forward}


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return [{init_inputs}]

{extra}
WORKLOADS = {{"gpu": [{gpu}], "cpu": [{cpu}]}}
'''
SMALL = "dict(batch=3, mid=6, cols=5), dict(batch=2, mid=9, cols=16)"
GPU = "dict(batch=64, mid=512, cols=1024)"


def problem(tmp_path: Path, name: str, forward: str, *, init: str = "pass", init_args: str = "", init_inputs: str = "",
            inputs: str = "torch.randn(batch, mid, cols)", constants: str = "", extra: str = "", cpu: str = SMALL,
            gpu: str = GPU) -> Problem:
    path = tmp_path / f"{name}.py"
    path.write_text(SOURCE.format(forward=forward, init=init, init_args=init_args, init_inputs=init_inputs,
                                  inputs=inputs, constants=constants, extra=extra, cpu=cpu, gpu=gpu))
    return load_problem(path)


CONV = dict(init_args="cin, cout", init_inputs="cin, cout", constants="cin, cout, h, w = 3, 4, 6, 7",
            init="self.conv = nn.Conv2d(cin, cout, 3, padding=1)", inputs="torch.randn(batch, cin, h, w)",
            forward="return torch.relu(self.conv(x) + 0.5) * 2.0",
            cpu="dict(batch=2, cin=3, cout=4, h=6, w=7)", gpu="dict(batch=32, cin=64, cout=128, h=64, w=64)")
KINDS = {  # name: problem arguments; kinds the other families do not take
    "softplus": dict(forward="return F.softplus(x)"),
    "middle_dim_sum": dict(forward="return torch.sigmoid(x).sum(dim=1)"),
    "masked_softmax": dict(forward="return torch.softmax(x.masked_fill(x < -1.0, float('-inf')) / 0.7, dim=1)"),
    "conv_bias_relu": CONV,
}


def candidate(prob: Problem, params: dict, device: str = "cpu") -> Candidate:
    plan = FAMILY.match(prob, None, device)
    return Candidate.make(prob.id, "triton", FAMILY.render(plan, params),
                          Origin(kind="builtin", proposer="inductor", params=params))


def verified(prob: Problem, cand: Candidate, workdir: Path, device: str = "cpu") -> str:
    """The real verify stage: every workload's trials, the held-out shape, the census against the policy."""
    result = run_stage("verify", VerifyRequest(workdir=str(workdir), problem=prob, candidate=cand, device=device),
                       "inline")
    # the request's sizes are verify's default, the CPU set, on either device
    assert (result.status, result.trials_passed) == ("ok", 5 * len(prob.workloads("cpu"))), result.message
    log = (workdir / result.files["verify_log"]).read_text()
    assert "held-out" in log, log[-2000:]
    return log


def launched(model_new: type, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the kernels the candidate's module launches from now on, in order (a list the caller clears)."""
    namespace, ran = sys.modules[model_new.__module__].__dict__, []
    launch_ = namespace["_kf_launch"]

    def spy(kernel, grid, *args, **meta):
        ran.append(kernel.fn.__name__)
        return launch_(kernel, grid, *args, **meta)

    monkeypatch.setitem(namespace, "_kf_launch", spy)
    return ran


def test_softplus_renders_a_self_contained_module_that_verifies(tmp_path: Path) -> None:
    prob = problem(tmp_path, "softplus", **KINDS["softplus"])
    plan = FAMILY.match(prob, None, "cpu")
    params = FAMILY.variants(plan)[0]
    assert (params["torch"], params["triton"]) == (torch.__version__, triton.__version__)
    source = FAMILY.render(plan, params)
    assert "@triton.jit" in source and "_kf_launch(" in source
    for absent in ("triton_heuristics", "torch._inductor", "torch._dynamo", "async_compile", "assert_size_stride"):
        assert absent not in source, absent
    verified(prob, Candidate.make(prob.id, "triton", source, Origin(kind="builtin", proposer="inductor",
                                                                     params=params)), tmp_path / "verify")


def test_a_workloads_own_code_keeps_inductors_conv_lowering_and_the_symbolic_code_a_plain_call(tmp_path: Path) -> None:
    """Inductor's conv lowering writes the weight's sizes into symbolic code, so there the convolution is a plain
    aten call; code for one workload's sizes is torch.compile's own, with its layout choice (here, as Inductor
    decides for this CPU: input and weight copied to channels-last before the call)."""
    plan = FAMILY.match(problem(tmp_path, "conv", **CONV), None, "cpu")
    symbolic, (static, *_) = plan.lowered["body"], plan.lowered["static"]
    call = next(i for i, s in enumerate(symbolic) if s.startswith("buf0 = torch.ops.aten.convolution.default("))
    assert not any("empty_strided" in s for s in symbolic[:call]), symbolic
    channels_last = "torch.empty_strided((2, 3, 6, 7), (126, 1, 21, 3), "
    assert any(s.startswith("buf0 = " + channels_last) for s in static["body"]), static["body"]
    assert any(s.startswith("buf2 = torch.convolution(buf0, buf1, ") for s in static["body"]), static["body"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(KINDS))
def test_kinds_no_other_family_takes_verify(name: str, tmp_path: Path) -> None:
    prob = problem(tmp_path, name, **KINDS[name])
    variants = FAMILY.variants(FAMILY.match(prob, None, "cpu"))
    verified(prob, candidate(prob, variants[0]), tmp_path / "verify0")
    if len(variants) > 1:  # another of Inductor's launch configurations
        verified(prob, candidate(prob, variants[1]), tmp_path / "verify1")


@pytest.mark.slow
@pytest.mark.parametrize("stem", ["06_row_mean", "13_conv2d_bias_relu_scale", "18_scaled_bias_softmax"])
def test_problems_verify(stem: str, tmp_path: Path) -> None:
    prob = load_problem(ROOT / "problems" / f"{stem}.py")
    verified(prob, candidate(prob, FAMILY.variants(FAMILY.match(prob, None, "cpu"))[0]), tmp_path / "verify")


def test_each_declared_workloads_sizes_run_code_for_them_and_other_sizes_the_symbolic_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As torch.compile runs code specialized to the shape it sees: forward runs, at a declared workload's sizes,
    Inductor's code for those sizes (its kernels named after the workload, the sizes constants), and at any other
    sizes the symbolic code; both give the reference's output."""
    prob = problem(tmp_path, "softplus", **KINDS["softplus"])
    plan = FAMILY.match(prob, None, "cpu")
    static = plan.lowered["static"]
    assert [(c["workload"], c["guard"]) for c in static] == [("cpu0", ["tuple(x.shape) == (3, 6, 5, )"]),
                                                          ("cpu1", ["tuple(x.shape) == (2, 9, 16, )"])]
    assert all(k["name"].endswith(f"_{c['workload']}") for c in static for k in c["kernels"])
    assert static[0]["launches"][0]["args"][-1] == "90"  # xnumel, 3 * 6 * 5; a symbol in the symbolic code's
    assert not plan.lowered["launches"][0]["args"][-1].isdigit()
    params = FAMILY.variants(plan)[0]
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model_new = load_model_class(candidate(prob, params), tmp_path / "load", "cpu")
    ran = launched(model_new, monkeypatch)
    for shape, kernels in (((3, 6, 5), [k["name"] for k in static[0]["kernels"]]),
                           ((2, 9, 16), [k["name"] for k in static[1]["kernels"]]),
                           ((4, 7, 3), [k["name"] for k in plan.lowered["kernels"]])):
        ran.clear()
        x = torch.randn(shape)
        torch.testing.assert_close(model_new()(x), torch.nn.functional.softplus(x))
        assert ran == kernels, (shape, ran)


@pytest.mark.slow
def test_each_verified_workload_gets_code_of_its_own_and_only_timed_ones_are_tuned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On cuda verify runs the CPU set's small shapes too, where the symbolic code, generated at a GPU workload,
    would hold that workload's module constants (here a group count): every verified workload gets code of its own,
    and only the timed set's kernels are launch parameters. Simulated on the CPU with both sets verified."""
    monkeypatch.setattr(inductor, "verified_sets", lambda device, sizes: [sizes, "gpu"])
    monkeypatch.setattr(inductor, "_memo", {})
    monkeypatch.setenv("KERNELFLOW_CACHE", str(tmp_path / "cache"))
    prob = problem(tmp_path, "groupnorm", init_args="groups, chans", init_inputs="groups, chans",
                   constants="groups, chans, h = 2, 8, 5", inputs="torch.randn(batch, chans, h)",
                   init="self.norm = nn.GroupNorm(groups, chans)", forward="return torch.relu(self.norm(x))",
                   cpu="dict(batch=2, groups=2, chans=8, h=5)", gpu="dict(batch=3, groups=4, chans=8, h=6)")
    plan = FAMILY.match(prob, None, "cpu")
    assert {c["workload"]: c["timed"] for c in plan.lowered["static"]} == {"cpu0": True, "gpu0": False}
    params = FAMILY.variants(plan)[0]
    tuned = {key.split(".")[0].rsplit("_", 1)[-1] for key in params if "." in key}
    assert "cpu0" in tuned and "gpu0" not in tuned, sorted(params)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model_new = load_model_class(candidate(prob, params), tmp_path / "load", "cpu")
    ran = launched(model_new, monkeypatch)
    for w in (prob.cpu_workloads[0], prob.gpu_workloads[0]):
        ran.clear()
        init, shape = (w.params["groups"], w.params["chans"]), (w.params["batch"], w.params["chans"], w.params["h"])
        new = model_new(*init).eval()
        with torch.no_grad():
            new.norm.weight.uniform_(0.5, 1.5)
            new.norm.bias.uniform_(-0.5, 0.5)
        x = torch.randn(shape)
        expected = torch.relu(torch.nn.functional.group_norm(x, init[0], new.norm.weight, new.norm.bias))
        torch.testing.assert_close(new(x), expected)
        assert ran and all(name.endswith(f"_{w.name}") for name in ran), (w.name, ran)


@pytest.mark.slow
def test_a_module_whose_code_differs_runs_symbolic_code_of_its_own(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Dynamo holds a module constant (a group count) at the generating workload's value: a workload that builds
    the module with another gets symbolic code of its own, which forward picks by the module's init arguments, so
    it is right there at any size, and the rest runs the generating workload's. Here verify's held-out shape comes
    from cpu1 (the smallest), at batch 2: the generating workload's symbolic code fails there, and cpu1's own code
    was generated at batch 2 (Dynamo would hold its batch of 1)."""
    prob = problem(tmp_path, "groups", init_args="groups, chans", init_inputs="groups, chans",
                   constants="groups, chans, h = 2, 8, 5", inputs="torch.randn(batch, chans, h)",
                   init="self.norm = nn.GroupNorm(groups, chans)", forward="return torch.relu(self.norm(x))",
                   cpu="dict(batch=2, groups=2, chans=8, h=5), dict(batch=1, groups=4, chans=8, h=3)")
    plan = FAMILY.match(prob, None, "cpu")
    assert [a["workload"] for a in plan.lowered["architectures"]] == ["cpu1"], plan.lowered["notes"]
    params = FAMILY.variants(plan)[0]
    assert not any("_arch" in key for key in params)
    cand = candidate(prob, params)
    verified(prob, cand, tmp_path / "verify")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    model_new = load_model_class(cand, tmp_path / "load", "cpu")
    ran = launched(model_new, monkeypatch)
    for groups, own in ((4, True), (2, False)):
        ran.clear()
        new = model_new(groups, 8).eval()
        with torch.no_grad():
            new.norm.weight.uniform_(0.5, 1.5)
            new.norm.bias.uniform_(-0.5, 0.5)
        x = torch.randn(3, 8, 7)  # no declared workload's sizes
        expected = torch.relu(torch.nn.functional.group_norm(x, groups, new.norm.weight, new.norm.bias))
        torch.testing.assert_close(new(x), expected)
        assert ran and all(name.endswith("_arch0") == own for name in ran), (groups, ran)
    ran.clear()  # cpu0's sizes, cpu1's module: cpu0's own code holds cpu0's groups, so cpu1's symbolic code runs
    new = model_new(4, 8).eval()
    x = torch.randn(2, 8, 5)
    torch.testing.assert_close(new(x), torch.relu(torch.nn.functional.group_norm(x, 4, new.norm.weight, new.norm.bias)))
    assert ran and all(name.endswith("_arch0") for name in ran), ran
    with pytest.raises(ValueError, match=r"init arguments \[2, 8\] or \[4, 8\]; this one was built with \[8, 8\]"):
        model_new(8, 8)(x)  # a module no code was checked for


@pytest.mark.slow
def test_a_number_forward_takes_is_part_of_the_guard(tmp_path: Path) -> None:
    """A number forward takes is held by the code for a workload's sizes: its guard compares it; one that is not
    finite (no comparison holds) leaves that workload to the symbolic code, with a note."""
    kinds = {"finite": "0.5", "infinite": "float('inf')"}
    for name, value in kinds.items():
        prob = problem(tmp_path, f"clamp_{name}", forward="return torch.clamp(x, max=limit) * 2.0",
                       inputs=f"torch.randn(batch, mid, cols), {value}")
        prob_source = prob.source.replace("def forward(self, x):", "def forward(self, x, limit):")
        (tmp_path / f"clamp_{name}.py").write_text(prob_source)
        plan = FAMILY.match(load_problem(tmp_path / f"clamp_{name}.py"), None, "cpu")
        guards = [c["guard"] for c in plan.lowered["static"]]
        if name == "finite":
            assert guards == [["tuple(x.shape) == (3, 6, 5, )", "limit == 0.5"],
                              ["tuple(x.shape) == (2, 9, 16, )", "limit == 0.5"]], guards
        else:
            assert guards == [] and len(plan.lowered["notes"]) == 2, plan.lowered["notes"]
            assert "not finite" in plan.lowered["notes"][0]


@pytest.mark.slow
def test_workloads_with_the_same_inputs_and_other_built_in_constants_are_refused(tmp_path: Path) -> None:
    """Two workloads differ only in an init argument that Inductor writes into its code as a constant: no code is
    right at both, so the family says so instead of a candidate that fails verify at one of them."""
    prob = problem(tmp_path, "scaled", init_args="scale", init="self.scale = scale", init_inputs="scale",
                   constants="scale = 2", forward="return x * self.scale",
                   cpu="dict(batch=3, mid=6, cols=5, scale=2), dict(batch=3, mid=6, cols=5, scale=3)")
    with pytest.raises(TemplateMismatch, match="workloads cpu0 and cpu1 take the same inputs"):
        FAMILY.match(prob, None, "cpu")


def test_launch_parameters_move_and_reach_the_launch(tmp_path: Path) -> None:
    """Each kernel's block sizes and warps are parameters the mutations change one kernel at a time, and the
    rendered launch uses them."""
    prob = problem(tmp_path, "middle_dim_sum", **KINDS["middle_dim_sum"])
    plan = FAMILY.match(prob, None, "cpu")
    params = FAMILY.variants(plan)[0]
    kernel = plan.lowered["kernels"][0]["name"]
    assert f"{kernel}.XBLOCK" in params and f"{kernel}.num_warps" in params
    moved = mutations.apply(Action(kind="increase_ilp", params={"kernel": kernel}), params)
    assert moved and moved[0][f"{kernel}.XBLOCK"] == 2 * params[f"{kernel}.XBLOCK"]
    assert f"XBLOCK = {moved[0][f'{kernel}.XBLOCK']}" in FAMILY.render(plan, moved[0])
    assert any(p != params for p in mutations.explore(params))


@pytest.mark.slow
def test_a_regenerated_choice_verifies(tmp_path: Path) -> None:
    """A variant with another of Inductor's choices (no split reductions) is generated when rendered."""
    prob = problem(tmp_path, "middle_dim_sum", **KINDS["middle_dim_sum"])
    plan = FAMILY.match(prob, None, "cpu")
    flipped = next(p for p in FAMILY.variants(plan) if p["split_reductions"] != plan.knobs["split_reductions"])
    verified(prob, candidate(prob, flipped), tmp_path / "verify")


def test_policy_without_vendor_libraries_names_the_op(tmp_path: Path) -> None:
    prob = problem(tmp_path, "conv_no_vendor", **{**CONV, "extra": "POLICY = dict(allow_vendor_libraries=False)"})
    with pytest.raises(TemplateMismatch, match=r"aten\.convolution \(cuBLAS/cuDNN calls\).*policy forbids"):
        FAMILY.match(prob, None, "cpu")


def test_code_that_launches_no_kernel_of_its_own_is_a_mismatch(tmp_path: Path) -> None:
    """A plain GEMM is one extern mm in Inductor's code: eager's own call, which the compile stage refuses as a
    Triton candidate (no kernel); the family says so at match, and coverage does not count it."""
    prob = problem(tmp_path, "plain_gemm", forward="return x @ self.w", init_args="cols", init_inputs="cols",
                   init="self.w = nn.Parameter(torch.randn(cols, cols))")
    with pytest.raises(TemplateMismatch, match=r"launches no generated kernel, only aten\.mm"):
        FAMILY.match(prob, None, "cpu")


@pytest.mark.parametrize("name,forward,reason", [
    ("data_dependent", "return x * 2 if x.sum() > 0 else x - 1", "torch.compile cannot compile forward"),
    ("returns_dict", "return {'y': x * 2}", "not a tensor or a tuple of tensors"),
    ("raises", "raise ValueError('no')", "torch.compile cannot compile forward"),
])
def test_what_cannot_be_compiled_is_a_mismatch(tmp_path: Path, name: str, forward: str, reason: str) -> None:
    prob = problem(tmp_path, name, forward=forward)
    with pytest.raises(TemplateMismatch, match=reason):
        FAMILY.match(prob, None, "cpu")


# The held-out shape (stages/problems/held_out.py) moves the input sizes and keeps the architecture's (what
# get_init_inputs reads): a conv's channels stay, so Inductor's code specialized to the weight's shape is kept, and an
# import-time tuple built from them (KernelBench's `bias_shape = (out_channels, 1, 1)`) stays consistent.
HELD_OUT = {
    "depthwise_conv": dict(init_args="c", init_inputs="c", constants="c, h, w = 16, 6, 7",
                           init="self.conv = nn.Conv2d(c, c, 3, padding=1, groups=c)",
                           inputs="torch.randn(batch, c, h, w)", forward="return self.conv(x) * 2.0",
                           cpu="dict(batch=2, c=16, h=6, w=7)", gpu="dict(batch=32, c=16, h=64, w=64)"),
    "bias_shape_tuple": dict(init_args="cin, cout, bias_shape", init_inputs="cin, cout, bias_shape",
                             constants="cin, cout, h, w = 3, 16, 6, 7\nbias_shape = (cout, 1, 1)",
                             init="self.conv = nn.Conv2d(cin, cout, 3)\n        "
                                  "self.bias = nn.Parameter(torch.randn(bias_shape))",
                             inputs="torch.randn(batch, cin, h, w)", forward="return torch.relu(self.conv(x) + self.bias)",
                             cpu="dict(batch=2, cin=3, cout=16, h=6, w=7)", gpu="dict(batch=32, cin=3, cout=16, h=64, w=64)"),
}


@pytest.mark.parametrize("name", ["depthwise_conv", pytest.param("bias_shape_tuple", marks=pytest.mark.slow)])
def test_code_specialized_to_the_modules_weights_is_kept_and_verifies(name: str, tmp_path: Path) -> None:
    """Moving the channels (as every size once moved) made the reference fail at the held-out shape, or Inductor's
    code hold x.size()[1] at the held-out shape's old value: the family refused both. The architecture's sizes stay;
    the code verifies, held-out shape (batch, height, width moved) included."""
    prob = problem(tmp_path, name, **HELD_OUT[name])
    plan = FAMILY.match(prob, None, "cpu")
    assert plan.lowered["notes"] == []
    log = verified(prob, candidate(prob, FAMILY.variants(plan)[0]), tmp_path / "verify")
    assert "held-out shape {'batch': 4, 'c" in log and "'h': 4, 'w': 6}: ok" in log, log[-1500:]


def test_a_size_fixed_for_one_module_is_checked_only_where_that_code_runs(tmp_path: Path) -> None:
    """The symbolic code holds a depthwise conv's channels (16, the generating workload's). cpu1 builds a module of
    8 channels: it gets symbolic code of its own, whose own fixed sizes are checked there; the GPU workload's module
    (32) is not verified on the CPU, so no code runs for it. Before, the 16 held against both refused the family."""
    conv = {**HELD_OUT["depthwise_conv"], "cpu": "dict(batch=2, c=16, h=6, w=7), dict(batch=1, c=8, h=5, w=6)",
            "gpu": "dict(batch=32, c=32, h=64, w=64)"}
    prob = problem(tmp_path, "depthwise_modules", **conv)
    plan = FAMILY.match(prob, None, "cpu")
    assert [a["workload"] for a in plan.lowered["architectures"]] == ["cpu1"], plan.lowered["notes"]
    assert plan.lowered["modules"] == ["[16]"]
    log = verified(prob, candidate(prob, FAMILY.variants(plan)[0]), tmp_path / "verify")
    assert "held-out shape" in log and ": ok" in log, log[-1500:]


def test_a_held_out_shape_the_reference_rejects_is_skipped_with_a_note(tmp_path: Path) -> None:
    """An import-time tuple of an input size: the reference fails at every held-out shape. As verify skips such a
    shape (with a note) and checks none where none is left, the family keeps the code, the reason in its header."""
    prob = problem(tmp_path, "flat_tuple", constants="cols = 10\nflat = (batch * mid, cols)",
                   forward="return torch.relu(x.reshape(flat)) * 2.0", cpu="dict(batch=3, mid=6, cols=10)",
                   gpu="dict(batch=3, mid=6, cols=10)")
    plan = FAMILY.match(prob, None, "cpu")
    assert [n.split(" (")[0] for n in plan.lowered["notes"]] == \
        ["held-out shape {'batch': 3, 'mid': 6, 'cols': 8}: skipped, the reference fails there"]
    cand = candidate(prob, FAMILY.variants(plan)[0])
    assert "# held-out shape {'batch': 3, 'mid': 6, 'cols': 8}: skipped, the reference fails there" in cand.source
    result = run_stage("verify", VerifyRequest(workdir=str(tmp_path / "v"), problem=prob, candidate=cand), "inline")
    log = (tmp_path / "v" / result.files["verify_log"]).read_text()
    assert result.status == "ok" and "held-out shape {'batch': 3, 'mid': 6, 'cols': 8}: skipped" in log, log[-1500:]


@pytest.mark.slow
def test_a_split_count_picked_from_the_size_is_no_built_in_constant(tmp_path: Path) -> None:
    """A whole-tensor sum: Inductor splits it into 12 parts at 96 x 1000 and into 8 at the held-out 64 x 992 (its
    choice from the sizes it sees), over symbolic sizes either way; with split reductions off the two generations
    are the same. The family keeps the code, with a note, and it verifies at the held-out shape."""
    prob = problem(tmp_path, "whole_sum", constants="batch, cols = 96, 1000", inputs="torch.randn(batch, cols)",
                   forward="return torch.sigmoid(x).sum()", cpu="dict(batch=96, cols=1000)",
                   gpu="dict(batch=4096, cols=4096)")
    plan = FAMILY.match(prob, None, "cpu")
    assert plan.knobs["split_reductions"] and len(plan.lowered["kernels"]) == 2
    assert [n.split(" (")[0] for n in plan.lowered["notes"]] == \
        ["Inductor splits a reduction otherwise at the held-out shape {'batch': 64, 'cols': 992}"]
    verified(prob, candidate(prob, FAMILY.variants(plan)[0]), tmp_path / "verify")


@pytest.mark.slow
def test_a_scan_kernels_combine_function_comes_along(tmp_path: Path) -> None:
    """Inductor writes a scan's combine function as a second @triton.jit function in the kernel's source; it is
    taken with its kernel, renamed after it (two kernels' helpers may share a name), and the module verifies."""
    prob = problem(tmp_path, "reverse_cumsum", forward="return torch.cumsum(x.flip(1), dim=1).flip(1)")
    plan = FAMILY.match(prob, None, "cpu")
    scan = next(k for k in plan.lowered["kernels"] if "cumsum" in k["name"])
    assert f"def _kf_{scan['name']}_triton_helper_fn_add0(" in scan["source"]
    assert f", _kf_{scan['name']}_triton_helper_fn_add0)" in scan["source"]  # the scan's combine_fn argument
    verified(prob, candidate(prob, FAMILY.variants(plan)[0]), tmp_path / "verify")


def test_generation_is_kept_on_disk_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELFLOW_CACHE", str(tmp_path / "cache"))
    inductor._memo.clear()  # this process's copies: only the disk is shared
    prob = problem(tmp_path, "softplus", **KINDS["softplus"])
    first = FAMILY.match(prob, None, "cpu")
    kept = list((tmp_path / "cache" / "inductor").glob("*.json"))
    assert len(kept) == 1 and "lowered" in json.loads(kept[0].read_text())
    inductor._memo.clear()

    def no_generation(*args: object) -> dict:
        raise AssertionError("generated again")

    monkeypatch.setattr(inductor, "_generate", no_generation)
    assert FAMILY.match(prob, None, "cpu").lowered == first.lowered


def test_the_builtin_proposer_offers_it_for_the_requests_device(tmp_path: Path) -> None:
    """The generate stage's candidates include Inductor's, taking turns with the other families'."""
    prob = problem(tmp_path, "middle_dim_sum", **KINDS["middle_dim_sum"])
    result = generate.run(GenerateRequest(problem=prob, n=4, device="cpu"))
    made = [c for c in result.candidates if c.origin.proposer == "inductor"]
    assert made and "XBLOCK" in made[0].source, result.message


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("name", sorted(KINDS))
def test_cuda_kinds_generate_for_the_gpu_and_verify(name: str, tmp_path: Path) -> None:
    prob = problem(tmp_path, name, **KINDS[name])
    plan = FAMILY.match(prob, None, "cuda")
    for params in FAMILY.variants(plan)[:2]:
        cand = candidate(prob, params, "cuda")
        assert "triton.knobs.runtime.interpret" in cand.source and "_kf_launch(" in cand.source
        verified(prob, cand, tmp_path / f"verify-{cand.id}", "cuda")


@cuda
@pytest.mark.parametrize("stem", ["06_row_mean", "11_linear_bias_gelu", "13_conv2d_bias_relu_scale",
                                  "18_scaled_bias_softmax", "24_conv2d_groupnorm_silu"])
def test_cuda_problems_verify(stem: str, tmp_path: Path) -> None:
    prob = load_problem(ROOT / "problems" / f"{stem}.py")
    verified(prob, candidate(prob, FAMILY.variants(FAMILY.match(prob, None, "cuda"))[0], "cuda"),
             tmp_path / "verify", "cuda")


def test_the_autotuners_pick_goes_first_and_a_kernel_without_one_keeps_inductors_order() -> None:
    a, b, c = ({"kwargs": {"XBLOCK": x}, "num_warps": w, "num_stages": 1} for x, w in ((1024, 4), (512, 8), (128, 4)))
    kernels = [{"name": "k_red_0_gpu0", "configs": [a, b]}, {"name": "k_poi_1_gpu0", "configs": [a, b]},
               {"name": "k_poi_2_gpu0", "configs": [a]}]
    notes = inductor_output.first_picked(kernels, {"k_red_0": b, "k_poi_1": c}, "_gpu0")
    assert [k["configs"] for k in kernels] == [[b, a], [c, a, b], [a]]
    assert len(notes) == 0
    assert inductor_output.first_picked([{"name": "k_red_0_gpu1", "configs": [a, b]}], {}, "_gpu1") == [
        "kernel k_red_0_gpu1: the autotuner's pick is unknown (the kernel did not run under that name), its "
        "configurations are tried in Inductor's order"]


@cuda
def test_on_the_gpu_each_workloads_kernels_start_with_the_autotuners_pick(tmp_path: Path) -> None:
    prob = load_problem(ROOT / "problems" / "18_scaled_bias_softmax.py")
    plan = FAMILY.match(prob, None, "cuda")
    assert plan.lowered["static"], plan.lowered["notes"]
    assert not [n for n in plan.lowered["notes"] if "autotuner's pick" in n]  # every kernel ran under its name, once per workload


def test_an_export_names_the_torch_it_was_generated_with() -> None:
    made = Candidate.make("p", "triton", "x = 1\n", Origin(kind="builtin", proposer="inductor",
                                                            params={"torch": "2.11.0+cu130", "triton": "3.6.0"}))
    plain = Candidate.make("p", "triton", "x = 2\n", Origin(kind="builtin", proposer="rowwise", params={"BLOCK": 64}))
    assert export.generated_with(made) == {"torch": "2.11.0+cu130", "triton": "3.6.0"}
    assert "torch==2.11.0+cu130 and triton==3.6.0" in export._run_note(made, ["torch", "triton"])
    assert export.generated_with(plain) is None and "torch==" not in export._run_note(plain, ["torch", "triton"])


def test_a_modules_key_is_its_init_arguments_not_their_values_or_addresses() -> None:
    """Numbers and tuples by value, defaults filled in; a tensor by shape and dtype (a random init tensor is the same
    module each time), an object whose repr is its address by its type."""
    class Model:
        def __init__(self, channels, weight=None, act=None, eps=1e-5):
            pass

    key = inductor_output.arch_key
    assert key(Model.__init__, [3]) == '[3, null, null, 1e-05]'
    assert key(Model.__init__, [3, torch.randn(2, 3), object()]) == key(Model.__init__, [3, torch.randn(2, 3), object()])
    assert key(Model.__init__, [3, torch.randn(2, 3)]) != key(Model.__init__, [3, torch.randn(3, 3)])
    assert key(Model.__init__, [3]) != key(Model.__init__, [4])
