"""The export's replayed forward (kernelflow/export_replay.py), on the CPU with stand-ins for Triton's compiled
kernels: a stand-in's launcher computes with torch on the tensors the plan hands it, so the plan's pointers, memory,
outputs and checks are exercised; real kernels on a GPU: tests/kernelflow/test_export.py."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
import triton
from torch import nn
from torch.utils._python_dispatch import _disable_current_modes

from kernelflow import export_replay
from kernelflow.export_replay import replay_status, replaying
from tests.stages.harness.test_integrity import needs_gpu

ROOT = Path(__file__).resolve().parents[2]

N = 64


class FakeCompiled:
    """CompiledKernel's surface as the plan uses it: run(gx, gy, gz, stream, function, packed metadata, launch
    metadata, enter hook, exit hook, *arguments)."""

    function, packed_metadata = 1, (4, 1, 0)

    def __init__(self, body: Any):
        self.body, self.launches = body, 0

    def run(self, gx, gy, gz, stream, function, packed, metadata, enter, exit_, *args):
        self.launches += 1
        if enter is not None:
            enter(metadata)
        with _disable_current_modes():  # a kernel's work is not ATen's: the recording's dispatch mode must not see it
            self.body(*args)


def _pointer(t: Any) -> int:
    return t if isinstance(t, int) else t.data_ptr()


def candidate_module(extra_launch: bool = False) -> types.ModuleType:
    """A stand-in for a template's model_new: its own _kf_launch, which records as the templates' does."""
    module = types.ModuleType("kf_fake_model_new")
    module._kf_recording = None

    def _kf_launch(compiled, grid, *args):
        enter = triton.knobs.runtime.launch_enter_hook
        compiled.run(*grid, 1, 1, 0, compiled.function, compiled.packed_metadata, None, enter if enter.calls else None,
                     None, *args)
        if module._kf_recording is not None:
            module._kf_recording.append((compiled, (*grid, 1, 1), args, ()))
    module._kf_launch = _kf_launch
    return module


def f32(t: Any, n: int) -> torch.Tensor:
    """n float32 values at t (a tensor, or a data pointer as the plan hands them over), as a kernel sees them."""
    return torch.frombuffer((ctypes.c_char * (4 * n)).from_address(_pointer(t)), dtype=torch.float32)


def scale(x, w, tmp, n):  # tmp = x * w
    f32(tmp, n).copy_(f32(x, n) * f32(w, n))


def shift_half(tmp, out, n, half):  # out = tmp + 1; `half` points at tmp's second half
    assert _pointer(half) == _pointer(tmp) + n // 2 * 4
    f32(out, n).copy_(f32(tmp, n) + 1)


SCALE, SHIFT = FakeCompiled(scale), FakeCompiled(shift_half)


def model_class(module: types.ModuleType, *, aten_op: bool = False, returns_input: bool = False,
                unseen_launch: bool = False, hooked_launch: bool = False, raw_pointer: bool = False) -> type[nn.Module]:
    class ModelNew(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.full((N,), 2.0))

        def forward(self, x):
            if returns_input:
                return x
            tmp = x.new_empty((N,))
            out = x.new_empty(x.shape)
            if aten_op:
                x = x * 1.0
            if unseen_launch:  # launched past _kf_launch, without the hooks: only the poisoned check can catch it
                SCALE.run(1, 1, 1, 0, 1, (), None, None, None, x, self.w, tmp, N)
            else:
                module._kf_launch(SCALE, (1,), x, self.w, tmp, N)
            if hooked_launch:  # a launch elsewhere that passes the hooks, as the JIT's does
                SCALE.run(1, 1, 1, 0, 1, (), None, triton.knobs.runtime.launch_enter_hook, None, x, self.w, tmp, N)
            half = tmp.data_ptr() + N // 2 * 4 if raw_pointer else tmp[N // 2:]
            module._kf_launch(SHIFT, (1,), tmp, out, N, half)
            return out
    return ModelNew


@pytest.fixture(autouse=True)
def on_cpu(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(export_replay, "REPLAY_DEVICES", {"cpu"})
    monkeypatch.setattr(export_replay, "_STREAM_OF", lambda index: 0)


def calls(model: nn.Module, times: int) -> list[torch.Tensor]:
    return [model(torch.randn(8, 8)) for _ in range(times)]


def test_the_third_call_replays_the_recorded_launches_on_new_inputs():
    module = candidate_module()
    model = replaying(model_class(module), module)()
    calls(model, 2)  # seen, then recorded and checked
    assert list(replay_status(model).values()) == ["replayed"]
    before = SCALE.launches, SHIFT.launches
    x = torch.randn(8, 8)
    got = model(x)
    assert (SCALE.launches, SHIFT.launches) == (before[0] + 1, before[1] + 1)
    assert torch.equal(got, x * 2 + 1) and got.shape == (8, 8)
    assert got.data_ptr() != model(x).data_ptr()  # fresh memory on every call


def test_a_forward_that_computes_with_aten_is_not_replayed():
    module = candidate_module()
    model = replaying(model_class(module, aten_op=True), module)()
    outs = calls(model, 3)
    assert outs[2].shape == (8, 8)
    (status,) = replay_status(model).values()
    assert status.startswith("the forward computes with ATen ops besides allocations and views: aten.mul")


def test_a_launch_the_recording_did_not_see_fails_the_poisoned_check():
    module = candidate_module()
    model = replaying(model_class(module, unseen_launch=True), module)()
    calls(model, 3)
    (status,) = replay_status(model).values()
    assert status == "the replay's outputs differ from the forward's (its memory filled with 0xFF)"


def test_a_triton_launch_outside_kf_launch_is_counted_and_not_replayed():
    module = candidate_module()
    model = replaying(model_class(module, hooked_launch=True), module)()
    calls(model, 3)
    assert list(replay_status(model).values()) == ["3 Triton launches, 2 of them through _kf_launch"]


def test_an_integer_that_points_into_memory_is_not_replayed():
    module = candidate_module()
    model = replaying(model_class(module, raw_pointer=True), module)()
    calls(model, 3)
    assert list(replay_status(model).values()) == [
        "an integer launch argument points into a tensor's memory: a plan would keep the pointer"]


def test_an_output_that_is_an_input_is_not_replayed():
    module = candidate_module()
    model = replaying(model_class(module, returns_input=True), module)()
    calls(model, 3)
    assert list(replay_status(model).values()) == ["the forward launched nothing through _kf_launch"]


def test_a_moved_module_tensor_sends_the_key_back_to_recording():
    module = candidate_module()
    model = replaying(model_class(module), module)()
    calls(model, 3)
    model.w = nn.Parameter(torch.full((N,), 3.0))  # a new tensor: the plan's pointer no longer holds
    x = torch.randn(8, 8)
    assert torch.equal(model(x), x * 3 + 1)  # the verified forward, on the new weight
    assert list(replay_status(model).values()) == ["seen once"]
    calls(model, 1)
    assert torch.equal(model(x), x * 3 + 1) and list(replay_status(model).values()) == ["replayed"]


def test_each_signature_has_its_own_plan_and_other_arguments_run_the_forward():
    module = candidate_module()
    model = replaying(model_class(module), module)()
    calls(model, 3)
    for _ in range(3):
        model(torch.randn(4, 16))  # another shape, the same element count
    assert list(replay_status(model).values()) == ["replayed", "replayed"]
    with pytest.raises(AttributeError, match="new_empty"):
        model([1, 2])  # not a tensor or number: the verified forward runs, and fails its own way


def test_a_launch_hook_makes_every_call_run_the_forward(monkeypatch: pytest.MonkeyPatch):
    module = candidate_module()
    model = replaying(model_class(module), module)()
    calls(model, 3)
    hook = triton.knobs.runtime.launch_enter_hook
    seen: list[Any] = []
    hook.add(seen.append)
    try:
        plan = next(iter(export_replay._PLANS[model].values()))
        monkeypatch.setattr(plan, "fn", None)  # a replay would fail
        x = torch.randn(8, 8)
        assert torch.equal(model(x), x * 2 + 1)
    finally:
        hook.remove(seen.append)


def test_cpu_tensors_are_never_recorded(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(export_replay, "REPLAY_DEVICES", {"cuda"})
    module = candidate_module()
    model = replaying(model_class(module), module)()
    calls(model, 3)
    assert list(replay_status(model).values()) == ["tensors on cpu: the verified forward runs"]


def test_a_module_without_a_recording_launch_is_refused():
    with pytest.raises(TypeError, match="does not launch through a recording _kf_launch"):
        replaying(nn.Identity, types.ModuleType("plain"))


@needs_gpu
def test_on_the_gpu_the_replay_matches_the_forward_and_keeps_every_check(tmp_path: Path) -> None:
    """tests/fixtures/replay_check.py in a process of its own with compiled Triton: template candidates of two families
    (two launches: elementwise's full blocks and tail, rowwise's split rows and their combine through a buffer; one:
    layernorm with weights, softmax) replay from the third call, bitwise equal to the verified forward on the recorded
    inputs and on new ones; a misaligned input is a key of its own; the census counts the replay's launches and ghost
    replay skips them; with a launch hook set the forward runs and the hook sees each launch; a replaced parameter is
    followed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "fixtures" / "replay_check.py"), str(tmp_path)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["failures"] == [], report


def test_only_a_recording_kf_launch_makes_an_export_replay():
    from kernelflow.export import _records_launches
    from kernelflow.stages.templates import launch

    template = f"import torch\nimport triton\n{launch.SOURCE}\nclass ModelNew(torch.nn.Module):\n    pass\n"
    assert _records_launches(template)
    assert not _records_launches((ROOT / "prompts" / "examples" / "triton_softmax.py").read_text())  # kernel[grid]
    assert not _records_launches(template.replace("_kf_recording = None", "_kf_unused = None"))  # an older template
