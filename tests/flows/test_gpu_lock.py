"""The per-GPU lock: one holder per physical GPU, different GPUs side by side."""

import threading
import time
from pathlib import Path

import pytest

from kernelflow.flows import gpu_lock as lock_module


def held_for(store: Path, key: str, seconds: float, monkeypatch: pytest.MonkeyPatch) -> threading.Thread:
    ready = threading.Event()

    def hold():
        with lock_module.gpu_lock(store, "cuda"):
            ready.set()
            time.sleep(seconds)

    monkeypatch.setattr(lock_module, "gpu_key", lambda: key)
    t = threading.Thread(target=hold)
    t.start()
    ready.wait(5)
    return t


def test_same_gpu_waits_other_gpu_does_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(lock_module.torch.cuda, "is_available", lambda: True)  # two GPUs, named by gpu_key below
    holder = held_for(tmp_path, "gpu-A", 1.0, monkeypatch)
    started = time.monotonic()
    with lock_module.gpu_lock(tmp_path, "cuda"):  # gpu-A again: waits for the holder
        waited_same = time.monotonic() - started
    holder.join()
    holder = held_for(tmp_path, "gpu-A", 1.0, monkeypatch)
    monkeypatch.setattr(lock_module, "gpu_key", lambda: "gpu-B")
    started = time.monotonic()
    with lock_module.gpu_lock(tmp_path, "cuda"):
        waited_other = time.monotonic() - started
    holder.join()
    assert waited_same > 0.5 and waited_other < 0.5


def test_a_cpu_call_or_a_machine_without_a_gpu_takes_no_lock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(lock_module.torch.cuda, "is_available", lambda: False)
    with lock_module.gpu_lock(tmp_path, "cuda"), lock_module.gpu_lock(tmp_path, "cpu"):
        assert not (tmp_path / "locks").exists()  # the stage itself says there is no GPU
