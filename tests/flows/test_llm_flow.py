"""The optimize flow with the `llm` proposer, end to end, against the fake OpenAI-compatible server: a kernel that
does not compile is debugged (diagnosis, then a patch) into one that verifies; an optimization that is wrong is
rejected and repaired; every call lands in the llm_calls table; budgets stop the run; the key stays out of the
store and out of the stage processes."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from fake_openai import FakeOpenAI, Scripted

from kernelflow.flows.config import LLMLimits, RunConfig
from tests.families import WRITTEN

pytestmark = pytest.mark.slow  # end to end (pyproject.toml: the slow marker)

ROOT = Path(__file__).resolve().parents[2]
SILU = str(ROOT / "problems" / "09_silu.py")
KEY = "sk-test-not-a-real-key-8c1f"

KERNEL = '''```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def silu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n).to(tl.float32)
    y = x * tl.sigmoidd(x)
    tl.store(y_ptr + offs, y, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        silu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
```'''
FIX = '''The kernel calls `tl.sigmoidd`, which Triton does not have: use `tl.sigmoid`.

<<<<<<< SEARCH
    y = x * tl.sigmoidd(x)
=======
    y = x * tl.sigmoid(x)
>>>>>>> REPLACE
'''
WRONG = '''Fewer instructions:
<<<<<<< SEARCH
    y = x * tl.sigmoid(x)
=======
    y = x * tl.sigmoid(x) + 0.01
>>>>>>> REPLACE
'''

REPAIR = """<<<<<<< SEARCH
    y = x * tl.sigmoid(x) + 0.01
=======
    y = x / (1.0 + tl.exp(-x))
>>>>>>> REPLACE
"""


def _tables(store: Path) -> dict[str, pd.DataFrame]:
    return {t.name: pd.read_parquet(t) for t in (store / "tables").iterdir()}


def test_llm_debugs_a_compile_error_then_a_wrong_optimization(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    from kernelflow.flows.optimize import optimize

    script = [Scripted(content=KERNEL), Scripted(content="`tl.sigmoidd` does not exist."), Scripted(content=FIX),
              Scripted(content=WRONG), Scripted(content="The + 0.01 changes every output."),
              Scripted(content=REPAIR)]
    with FakeOpenAI(script) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        summary = optimize(SILU, RunConfig(budget=4, store=str(tmp_path), device="cpu", proposer="llm", families=WRITTEN, profile=False, seeds=0, llm=LLMLimits(model="fake-model")))
    t = _tables(tmp_path)
    cands, calls = t["candidates"], t["llm_calls"]
    assert list(calls.purpose) == ["init", "debug_diagnose", "debug_patch", "optimize", "debug_diagnose",
                                   "debug_patch"] and set(calls.status) == {"ok"}
    assert list(t["compiles"].failure_kind.fillna("ok")) == ["compile_error", "ok", "ok", "ok"]
    assert list(t["verifications"].failure_kind.fillna("ok")) == ["ok", "mismatch", "ok"]
    assert list(cands.parent_id.iloc[1:]) == list(cands.id.iloc[:3])  # each a repair or refinement of the last
    assert "sigmoidd" in server.requests[1]["messages"][-1]["content"]  # the compiler's evidence reached the model
    assert "off by" in server.requests[4]["messages"][-1]["content"]  # so did the mismatch statistics
    assert server.keys_seen == [KEY] * 6 and summary["best_candidate_id"] in set(cands.id)
    origins = [json.loads(p) for p in cands.origin_params]
    assert [o["purpose"] for o in origins] == ["init", "debug_patch", "optimize", "debug_patch"]
    stored = "".join(p.read_bytes().decode(errors="replace") for p in tmp_path.rglob("*") if p.is_file())
    assert KEY not in stored  # not in any table, blob or log


def test_the_first_prompt_shows_the_best_seed_as_the_kernel_to_beat(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    """An llm run evaluates the builtin proposer's seeds first (here the elementwise family's best guess); the model's
    first prompt is the best of them, with its times beside the baselines' and its profile, to make faster."""
    from kernelflow.flows.optimize import optimize

    fixed = KERNEL.replace("tl.sigmoidd", "tl.sigmoid")
    with FakeOpenAI([Scripted(content=fixed)]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        summary = optimize(SILU, RunConfig(budget=2, store=str(tmp_path), device="cpu", proposer="llm",
                                           families=WRITTEN, baseline_profiles=False, llm=LLMLimits(model="fake-model")))
    t = _tables(tmp_path)
    cands, calls = t["candidates"], t["llm_calls"]
    assert list(cands.origin_kind) == ["builtin", "llm"] and cands.origin_proposer.iloc[0] == "elementwise"
    assert list(calls.purpose) == ["optimize"] and cands.parent_id.iloc[1] == cands.id.iloc[0]
    prompt = server.requests[0]["messages"][-1]["content"]
    assert cands.source.iloc[0] in prompt  # the seed's own source, as the kernel to make faster
    assert "Its median time per call on cpu:\n- cpu0 {'batch_size': 7, 'dim': 96}: " in prompt, prompt
    assert " us (eager " in prompt and "Bottleneck class: memory" in prompt  # its times and its profile
    assert summary["best_candidate_id"] in set(cands.id)


def test_replies_without_code_and_failed_calls_are_recorded_and_stop_the_run(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    from kernelflow.flows.optimize import optimize
    from kernelflow.stages.llm import client

    script = [Scripted(content="I would use a fused kernel."), Scripted(content="```python\nimport torch\n",
                                                                         finish_reason="length"),
              Scripted(status=500), Scripted(status=503)]  # the third call: its 2 attempts fail
    monkeypatch.setattr(client, "SLEEP", lambda s: None)
    with FakeOpenAI(script) as server:
        monkeypatch.setenv("KERNELFLOW_LLM_MAX_ATTEMPTS", "2")
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        summary = optimize(SILU, RunConfig(budget=4, store=str(tmp_path), device="cpu", proposer="llm", families=WRITTEN, seeds=0, llm=LLMLimits(model="fake-model")))
    t = _tables(tmp_path)
    assert "candidates" not in t and list(t["llm_calls"].status) == ["ok", "ok", "failed"]
    assert "server_error" in summary["stop_reason"] and summary["winner"] == "eager" and len(server.requests) == 4


def test_the_token_budget_stops_the_run(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    from kernelflow.flows.optimize import optimize

    with FakeOpenAI([Scripted(content=KERNEL, usage=(900, 300))]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        summary = optimize(SILU, RunConfig(budget=4, store=str(tmp_path), device="cpu", proposer="llm", families=WRITTEN, seeds=0, llm=LLMLimits(model="fake-model", max_tokens=1000)))
    assert "token" in summary["stop_reason"] and len(server.requests) == 1


def test_stage_processes_get_no_secrets(monkeypatch, tmp_path: Path) -> None:
    """Candidate code runs in stage processes: their environment has no API keys, tokens or cloud credentials."""
    from kernelflow.stages.contracts import StageRequest
    from kernelflow.stages.executors.run import stage_env

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
                 "PREFECT_API_KEY"):
        monkeypatch.setenv(name, KEY)
    monkeypatch.setenv("KERNELFLOW_CACHE", str(tmp_path))
    env = stage_env(StageRequest(workdir=str(tmp_path)))
    assert KEY not in env.values() and env["KERNELFLOW_CACHE"] == str(tmp_path) and "PATH" in env


def test_no_model_is_a_clear_stop_not_a_crash(prefect_harness, tmp_path: Path, monkeypatch) -> None:
    from kernelflow.flows.optimize import optimize

    monkeypatch.delenv("KERNELFLOW_LLM_MODEL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    summary = optimize(SILU, RunConfig(budget=2, store=str(tmp_path), device="cpu", proposer="llm", families=WRITTEN, profile=False, seeds=0))
    assert "gave no candidate: LLM call failed (config): no model" in summary["stop_reason"]
    assert summary["winner"] == "eager"


def test_the_flow_resolves_the_key_from_a_prefect_secret_and_hands_it_to_the_stage(prefect_harness, tmp_path: Path,
                                                                                  monkeypatch) -> None:
    """No OPENAI_API_KEY: the flow reads the Prefect Secret block KERNELFLOW_LLM_SECRET_BLOCK names and passes the key
    in the generate request, which never serializes it; the stage reads no Prefect."""
    from prefect.blocks.system import Secret

    from kernelflow.flows.optimize import optimize
    from kernelflow.stages.contracts import GenerateRequest
    from kernelflow.stages.problems.kernelbench import load_problem

    Secret(value=KEY).save("kernelflow-test-llm-key", overwrite=True)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("KERNELFLOW_LLM_SECRET_BLOCK", "kernelflow-test-llm-key")
    with FakeOpenAI([Scripted(content=KERNEL)]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        optimize(SILU, RunConfig(budget=1, store=str(tmp_path), device="cpu", proposer="llm", families=WRITTEN,
                                 profile=False, baseline_profiles=False, llm=LLMLimits(model="fake-model")))
    assert server.keys_seen == [KEY]
    req = GenerateRequest(problem=load_problem(SILU), n=1, api_key=KEY)
    assert KEY not in req.model_dump_json() and KEY not in repr(req)
