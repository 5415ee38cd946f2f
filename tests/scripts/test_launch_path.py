"""scripts/launch_path.py measures CUDA launches: without a GPU it refuses, saying why, instead of measuring nothing."""

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the refusal is what a machine without a GPU gets")
def test_refuses_without_cuda(capsys):
    spec = importlib.util.spec_from_file_location("launch_path", ROOT / "scripts" / "launch_path.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(SystemExit, match="no CUDA device"):
        module.main(["--problems", "14_residual_layernorm"])
