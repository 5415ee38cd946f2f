"""stages/llm/client.py against a fake OpenAI-compatible server over real HTTP; waits are recorded, not slept."""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from email.utils import formatdate

import openai
import pytest

from kernelflow.stages.llm import client
from kernelflow.stages.llm.client import LLMBudget, LLMError, LLMReply, LLMSettings, complete
from tests.fake_openai import FakeOpenAI, Scripted

KEY = "sk-fake-0123456789-do-not-leak"
MESSAGES = [{"role": "system", "content": "you write kernels"}, {"role": "user", "content": "softmax, please"}]


@pytest.fixture(autouse=True)
def waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The key in the environment only, and the waits between attempts recorded instead of slept."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("KERNELFLOW_LLM_SECRET_BLOCK", raising=False)
    asked: list[float] = []
    monkeypatch.setattr(client, "SLEEP", asked.append)
    return asked


def ask(server: FakeOpenAI, budget: LLMBudget | None = None, **settings: float) -> LLMReply:
    """complete() against the server; whatever comes back, the key is in no row and no message."""
    try:
        reply = complete(MESSAGES, LLMSettings(model="fake-model", base_url=server.base_url, **settings),  # type: ignore[arg-type]
                         "init", budget)
    except LLMError as e:
        assert e.call is not None and KEY not in e.call.model_dump_json() and KEY not in str(e)
        raise
    assert KEY not in reply.model_dump_json()
    return reply


def test_good_reply_is_accounted():
    with FakeOpenAI([Scripted(content="def kernel(): ...", usage=(1000, 500))]) as server:
        reply = ask(server, price_in_usd_per_mtok=2.0, price_out_usd_per_mtok=10.0)
    call = reply.call
    assert (reply.text, reply.finish_reason) == ("def kernel(): ...", "stop")
    assert (call.status, call.attempts, call.tokens_in, call.tokens_out, call.purpose) == ("ok", 1, 1000, 500, "init")
    assert call.cost_usd == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6) and 0 < call.latency_s < 5
    assert server.requests[0]["messages"] == MESSAGES and server.requests[0]["model"] == "fake-model"
    assert server.keys_seen == [KEY]


def test_unknown_usage_or_prices_leave_tokens_and_cost_none():
    with FakeOpenAI([Scripted(usage=None), Scripted()]) as server:
        no_usage, no_prices = ask(server, price_in_usd_per_mtok=1.0).call, ask(server).call
    assert (no_usage.tokens_in, no_usage.cost_usd, no_prices.tokens_in, no_prices.cost_usd) == (None, None, 10, None)


@pytest.mark.parametrize("as_date", [False, True])
def test_rate_limit_waits_retry_after_then_succeeds(waits, as_date):
    retry_after, floor_s = (formatdate(time.time() + 10, usegmt=True), 8.0) if as_date else ("1", 1.0)
    with FakeOpenAI([Scripted(status=429, headers={"Retry-After": retry_after}), Scripted(content="hi")]) as server:
        reply = ask(server)
    assert (reply.text, reply.call.attempts, len(server.requests)) == ("hi", 2, 2)
    assert len(waits) == 1 and floor_s <= waits[0] <= 60


def test_server_errors_until_max_attempts(waits):
    with FakeOpenAI([Scripted(status=500)] * 4) as server, pytest.raises(LLMError) as err:
        ask(server, max_attempts=4, max_backoff_s=3.0)
    call = err.value.call
    assert (err.value.kind, call.status, call.error_kind, call.attempts) == ("server_error", "failed", "server_error", 4)
    assert "scripted error" in str(err.value) and "4 attempt" in str(err.value) and len(server.requests) == 4
    assert len(waits) == 3 and all(0 <= w <= 3.0 for w in waits)


def test_slow_reply_times_out_after_retries():
    with FakeOpenAI([Scripted(delay_s=1.5)] * 2) as server, pytest.raises(LLMError) as err:
        ask(server, timeout_s=0.5, max_attempts=2)
    assert (err.value.kind, err.value.call.attempts, len(server.requests)) == ("timeout", 2, 2)


def test_dropped_connection_is_retried():
    with FakeOpenAI([Scripted(drop=True), Scripted(content="back")]) as server:
        reply = ask(server)
    assert (reply.text, reply.call.attempts) == ("back", 2)


@pytest.mark.parametrize("status, kind", [(401, "auth"), (403, "auth"), (400, "invalid_request"),
                                          (404, "invalid_request"), (422, "invalid_request")])
def test_client_errors_fail_at_once_without_the_key(waits, status, kind):
    echo = f"Incorrect API key provided: {KEY}"  # a server may echo the key; it must not reach us
    with FakeOpenAI([Scripted(status=status, error_message=echo)]) as server, pytest.raises(LLMError) as err:
        ask(server)
    assert (err.value.kind, err.value.call.attempts, len(server.requests), waits) == (kind, 1, 1, [])
    assert f"HTTP {status}" in str(err.value) and "fake-model" in str(err.value) and "Incorrect API key" in str(err.value)


def test_budget_charged_then_refuses_without_contacting_the_server():
    budget = LLMBudget(max_tokens=100)
    with FakeOpenAI([Scripted(usage=(100, 50)), Scripted()]) as server:
        assert ask(server, budget=budget).call.tokens_out == 50
        with pytest.raises(LLMError) as err:
            ask(server, budget=budget)
    assert (err.value.kind, err.value.call.attempts, len(server.requests), budget.used_tokens) == ("budget", 0, 1, 150)
    assert "150 of 100" in str(err.value)


def test_budget_spent_during_waits_stops_retries(monkeypatch):
    budget = LLMBudget(max_usd=1.0)
    monkeypatch.setattr(client, "SLEEP", lambda s: setattr(budget, "used_usd", 1.5))  # another call spent it
    with FakeOpenAI([Scripted(status=500), Scripted()]) as server, pytest.raises(LLMError) as err:
        ask(server, budget=budget)
    assert (err.value.kind, err.value.call.attempts, len(server.requests)) == ("budget", 1, 1)


def test_no_api_key_anywhere(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with FakeOpenAI([Scripted()]) as server, pytest.raises(LLMError) as err:
        ask(server)
    assert err.value.kind == "auth" and "OPENAI_API_KEY" in str(err.value) and server.requests == []


def test_settings_from_env(monkeypatch):
    for var, value in {"MODEL": "m1", "TEMPERATURE": "0.7", "MAX_TOKENS": "1000", "TIMEOUT_S": "30",
                       "MAX_ATTEMPTS": "3", "PRICE_IN": "1.5", "PRICE_OUT": "6"}.items():
        monkeypatch.setenv(f"KERNELFLOW_LLM_{var}", value)
    settings = LLMSettings.from_env(temperature=0.0, model=None, base_url="http://h/v1")
    assert settings == LLMSettings(model="m1", temperature=0.0, max_tokens=1000, timeout_s=30.0, max_attempts=3,
                                   base_url="http://h/v1", price_in_usd_per_mtok=1.5, price_out_usd_per_mtok=6.0)
    monkeypatch.delenv("KERNELFLOW_LLM_MODEL")
    with pytest.raises(LLMError, match="KERNELFLOW_LLM_MODEL"):
        LLMSettings.from_env()


def test_fake_server_lists_models_and_wants_a_bearer_key():
    with FakeOpenAI([]) as server:
        assert [m.id for m in openai.OpenAI(api_key=KEY, base_url=server.base_url).models.list()] == ["fake-model"]
        with pytest.raises(urllib.error.HTTPError, match="401"):
            urllib.request.urlopen(urllib.request.Request(f"{server.base_url}/chat/completions", data=b"{}"))
        assert server.requests == []
