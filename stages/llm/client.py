"""Calling an OpenAI-compatible chat-completions endpoint, with retries, accounting and budgets.

Retry policy: the openai SDK's own retries are off; tenacity makes at most `max_attempts` attempts.
Retried: 429 rate limits, 5xx server errors, timeouts and connection failures, after a wait drawn at
random from [0, 2**(n-1)] s capped by `max_backoff_s` (exponential backoff with full jitter); a Retry-After
header (seconds or HTTP date) is a floor the cap does not lower: the server is never asked again before it
said. A call has a wall-clock limit, `max_call_s` (attempts and waits together; each attempt's HTTP timeout
is cut to what is left): when the next wait would end past it, the call gives up at once with the last
error, the message saying so. Not retried: 401/403 ("auth") and 400/404/422 and other 4xx
("invalid_request"), which fail at once. The budget is checked before every attempt, so a budget spent
meanwhile stops the retries ("budget"). Every outcome is an LLMCall row, on the LLMReply or on the LLMError;
the API key never enters a row, a message or a log.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import openai
from pydantic import Field
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    wait_random_exponential,
)

from kernelflow.stages.contracts import Contract, LLMCall
from kernelflow.stages.errors import KernelflowError

__all__ = ["LLMBudget", "LLMCall", "LLMError", "LLMReply", "LLMSettings", "api_key", "complete"]

SLEEP: Callable[[float], None] = time.sleep  # the wait between attempts; tests replace it
CLOCK: Callable[[], float] = time.monotonic  # a call's wall clock (its limit, its latency); tests replace both
RETRIED = (openai.RateLimitError, openai.InternalServerError, openai.APITimeoutError, openai.APIConnectionError)
_KINDS: list[tuple[type[openai.APIError], str]] = [  # first match wins (APITimeoutError is an APIConnectionError)
    (openai.RateLimitError, "rate_limited"), (openai.InternalServerError, "server_error"),
    (openai.APITimeoutError, "timeout"), (openai.APIConnectionError, "connection"),
    (openai.AuthenticationError, "auth"), (openai.PermissionDeniedError, "auth"),
    (openai.APIStatusError, "invalid_request"),
]
_ENV = {"model": "KERNELFLOW_LLM_MODEL", "temperature": "KERNELFLOW_LLM_TEMPERATURE",
        "max_tokens": "KERNELFLOW_LLM_MAX_TOKENS", "timeout_s": "KERNELFLOW_LLM_TIMEOUT_S",
        "max_attempts": "KERNELFLOW_LLM_MAX_ATTEMPTS", "max_call_s": "KERNELFLOW_LLM_MAX_CALL_S",
        "price_in_usd_per_mtok": "KERNELFLOW_LLM_PRICE_IN",
        "price_out_usd_per_mtok": "KERNELFLOW_LLM_PRICE_OUT"}


class LLMError(KernelflowError):
    """A chat-completion call failed or was refused; `kind` is an LLMCall.error_kind, `call` its row."""

    def __init__(self, kind: str, detail: str, call: LLMCall | None = None):
        self.kind, self.detail, self.call = kind, detail, call
        super().__init__(f"LLM call failed ({kind}): {detail}")


class LLMSettings(Contract):
    """Which model to ask and how; no API key here (contracts are stored as rows)."""

    model: str = Field(description="model name sent to the endpoint")
    temperature: float = Field(default=0.2, description="sampling temperature")
    max_tokens: int = Field(default=8192, description="completion token limit per call")
    timeout_s: float = Field(default=120.0, description="HTTP timeout of one attempt")
    max_attempts: int = Field(default=6, ge=1, description="attempts in all, the first included")
    max_backoff_s: float = Field(default=60.0, description="cap of one backoff wait between attempts (a longer "
                                 "Retry-After is still honoured)")
    max_call_s: float = Field(default=600.0, gt=0, description="wall-clock seconds one call may take, attempts and "
                              "waits included; a wait that would end past it is not made: the call fails at once")
    base_url: str | None = Field(default=None, description="endpoint, e.g. http://host:8000/v1; "
                                 "None: the openai SDK reads OPENAI_BASE_URL")
    price_in_usd_per_mtok: float = Field(default=0.0, description="prompt price per million tokens; 0: unknown")
    price_out_usd_per_mtok: float = Field(default=0.0, description="completion price per million tokens; 0: unknown")

    @classmethod
    def from_env(cls, **overrides: Any) -> LLMSettings:
        """Settings from KERNELFLOW_LLM_* variables; overrides that are not None win."""
        values: dict[str, Any] = {field: os.environ[var] for field, var in _ENV.items() if os.environ.get(var)}
        values |= {name: value for name, value in overrides.items() if value is not None}
        if "model" not in values:
            raise LLMError("config", "no model: set KERNELFLOW_LLM_MODEL or pass model=")
        return cls(**values)


class LLMReply(Contract):
    text: str = Field(description="the assistant message's content ('' when it had none)")
    finish_reason: str | None = Field(description="stop, or length when truncated at max_tokens")
    call: LLMCall = Field(description="the accounting row of this call")


class LLMBudget(Contract):
    """What a run may spend on LLM calls; complete() refuses once it is spent and charges each reply."""

    max_tokens: int | None = Field(default=None, description="tokens in + out allowed; None: no limit")
    max_usd: float | None = Field(default=None, description="estimated dollars allowed; None: no limit")
    used_tokens: int = Field(default=0, description="tokens in + out charged so far")
    used_usd: float = Field(default=0.0, description="estimated dollars charged so far")

    def charge(self, call: LLMCall) -> None:
        self.used_tokens += (call.tokens_in or 0) + (call.tokens_out or 0)
        self.used_usd += call.cost_usd or 0.0

    def tokens_left(self) -> int | None:
        return None if self.max_tokens is None else max(self.max_tokens - self.used_tokens, 0)

    def usd_left(self) -> float | None:
        return None if self.max_usd is None else max(self.max_usd - self.used_usd, 0.0)

    def exhausted(self) -> str | None:
        """Why the budget is spent, or None while some is left."""
        if self.max_tokens is not None and self.used_tokens >= self.max_tokens:
            return f"token budget spent: {self.used_tokens} of {self.max_tokens} tokens used"
        if self.max_usd is not None and self.used_usd >= self.max_usd:
            return f"dollar budget spent: ${self.used_usd:.4f} of ${self.max_usd:.4f} used"
        return None


def api_key(given: str | None = None) -> str:
    """The key the caller resolved (the flow: OPENAI_API_KEY or a Prefect Secret block), else OPENAI_API_KEY."""
    if key := given or os.environ.get("OPENAI_API_KEY"):
        return key
    raise LLMError("auth", "no API key: set OPENAI_API_KEY, or KERNELFLOW_LLM_SECRET_BLOCK to the name of a "
                           "Prefect Secret block holding it")


def openai_client(settings: LLMSettings, key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(api_key=api_key(key), base_url=settings.base_url, timeout=settings.timeout_s, max_retries=0)


def complete(messages: list[dict[str, str]], settings: LLMSettings, purpose: str, budget: LLMBudget | None = None,
             client_factory: Callable[[LLMSettings], openai.OpenAI] | None = None,
             secret: str | None = None) -> LLMReply:
    """One chat completion, retried per the module's policy; raises LLMError (with its LLMCall) on failure. `secret`:
    the endpoint's key (else OPENAI_API_KEY)."""
    started_at, t0, attempts = datetime.now(UTC).isoformat(timespec="milliseconds"), CLOCK(), 0
    gave_up: list[str] = []  # why the retries stopped before max_attempts: the wall-clock limit

    def row(**fields: Any) -> LLMCall:
        return LLMCall(call_id=uuid.uuid4().hex, purpose=purpose, model=settings.model, attempts=attempts,
                       latency_s=CLOCK() - t0, started_at=started_at, **fields)

    def stop(state: RetryCallState) -> bool:  # the attempts are spent, or the next wait would pass the limit
        if state.attempt_number >= settings.max_attempts:
            return True
        elapsed = CLOCK() - t0
        if elapsed + state.upcoming_sleep <= settings.max_call_s:
            return False
        asked = _retry_after_s(state.outcome.exception() if state.outcome else None)
        gave_up.append(f"gave up after {elapsed:.0f} s: the next wait of {state.upcoming_sleep:.0f} s"
                       + (f" (Retry-After {asked:.0f} s)" if asked else "")
                       + f" would pass the call's wall-clock limit of {settings.max_call_s:.0f} s")
        return True

    key = None
    try:
        _check(budget)  # before the key is looked up or the server contacted
        client = client_factory(settings) if client_factory else openai_client(settings, secret)
        key = client.api_key
        for attempt in Retrying(stop=stop, wait=_wait(settings.max_backoff_s), retry=retry_if_exception_type(RETRIED),
                                sleep=lambda s: SLEEP(s), reraise=True):
            with attempt:
                _check(budget)  # another call may have spent it during the wait
                attempts += 1
                left_s = max(settings.max_call_s - (CLOCK() - t0), 1.0)
                response = client.chat.completions.create(
                    messages=messages,  # type: ignore[arg-type]
                    model=settings.model, temperature=settings.temperature, max_tokens=settings.max_tokens,
                    timeout=min(settings.timeout_s, left_s))
    except LLMError as e:
        e.call = row(status="failed", error_kind=e.kind, message=e.detail)
        raise
    except openai.APIError as e:
        kind = next((kind for cls, kind in _KINDS if isinstance(e, cls)), "server_error")  # e.g. a malformed body
        why = f", {gave_up[-1]}" if gave_up else ""
        detail = _redact(f"model {settings.model}, {attempts} attempt(s){why}: {_describe(e)}", key)[:500]
        raise LLMError(kind, detail, row(status="failed", error_kind=kind, message=detail)) from None
    choice, usage = response.choices[0], response.usage
    tokens_in, tokens_out = (usage.prompt_tokens, usage.completion_tokens) if usage else (None, None)
    cost = None  # unknown without usage or prices
    if usage and (settings.price_in_usd_per_mtok or settings.price_out_usd_per_mtok):
        cost = (usage.prompt_tokens * settings.price_in_usd_per_mtok
                + usage.completion_tokens * settings.price_out_usd_per_mtok) / 1e6
    call = row(status="ok", tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost,
               finish_reason=choice.finish_reason, message=f"ok after {attempts} attempt(s)")
    if budget is not None:
        budget.charge(call)
    return LLMReply(text=choice.message.content or "", finish_reason=choice.finish_reason, call=call)


def _check(budget: LLMBudget | None) -> None:
    if budget is not None and (reason := budget.exhausted()):
        raise LLMError("budget", reason)


def _wait(cap_s: float) -> Callable[[RetryCallState], float]:
    jitter = wait_random_exponential(multiplier=1, max=cap_s)

    def wait(state: RetryCallState) -> float:  # the backoff, capped; the server's Retry-After, never shortened
        error = state.outcome.exception() if state.outcome else None
        return max(jitter(state), _retry_after_s(error) or 0.0)

    return wait


def _retry_after_s(error: BaseException | None) -> float | None:
    """The Retry-After header of an HTTP error response, in seconds (it may be an HTTP date)."""
    value = error.response.headers.get("retry-after") if isinstance(error, openai.APIStatusError) else None
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp() - time.time()


def _describe(error: openai.APIError) -> str:
    if isinstance(error, openai.APIStatusError):
        body = error.body
        said = body.get("message") if isinstance(body, dict) else None
        return f"HTTP {error.status_code} ({type(error).__name__}): {said or error.message}"
    return f"{type(error).__name__}: {error.message}"


def _redact(text: str, key: str | None) -> str:
    """Servers may echo the key in an error message; it never leaves this module."""
    return text.replace(key, "***") if key else text
