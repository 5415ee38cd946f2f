"""The `llm` proposer: a model behind any OpenAI-compatible endpoint writes, debugs and optimizes kernels.

Three paths, chosen by the request: no parent → `init` (write a module); a failed parent (parent_failure) →
debug in two calls, `debug_diagnose` (the cause, from the compiler log, mismatch statistics or runtime error)
then `debug_patch` (a localized SEARCH/REPLACE patch on the parent, in the same conversation); a verified parent
→ `optimize` (its profile feedback and the search's lessons; a patch or a whole module). The reply is parsed and
repaired deterministically (stages/llm/parse.py); every call, failed or not, is returned for the llm_calls table.
A reply with no usable code is no candidate, with the reason in the message; the flow decides what follows.
"""

from __future__ import annotations

from kernelflow.stages.contracts import (
    Backend,
    Candidate,
    GenerateRequest,
    GenerateResult,
    LLMCall,
    Origin,
    sha256_text,
)
from kernelflow.stages.llm.client import LLMBudget, LLMError, LLMSettings, complete
from kernelflow.stages.llm.parse import ReplyError, parse_reply
from kernelflow.stages.llm.prompts import messages


def _ask(chat: list[dict[str, str]], purpose: str, settings: LLMSettings, budget: LLMBudget,
         calls: list[LLMCall], key: str | None) -> tuple[str, str | None]:
    try:
        reply = complete(chat, settings, purpose, budget, secret=key)
    except LLMError as e:
        if e.call is not None:
            calls.append(e.call)
        raise
    calls.append(reply.call)
    return reply.text, reply.finish_reason


def _converse(req: GenerateRequest, backend: Backend, settings: LLMSettings, budget: LLMBudget,
              calls: list[LLMCall]) -> tuple[str, str, str | None, str]:
    """(purpose, reply text, finish reason, hash of the prompts) for the request's path."""
    key = req.api_key.get_secret_value() if req.api_key is not None else None
    if req.parent is not None and req.parent_failure is not None:
        chat = messages("debug_diagnose", req, backend)
        diagnosis, _ = _ask(chat, "debug_diagnose", settings, budget, calls, key)
        chat = messages("debug_patch", req, backend, history=chat[1:] + [{"role": "assistant", "content": diagnosis}],
                        diagnosis=diagnosis)
        purpose = "debug_patch"
    else:
        purpose = "optimize" if req.parent is not None else "init"
        chat = messages(purpose, req, backend)
    text, finish = _ask(chat, purpose, settings, budget, calls, key)
    return purpose, text, finish, sha256_text("\n".join(m["content"] for m in chat))


def propose(req: GenerateRequest) -> GenerateResult:
    backend: Backend = req.backend or "triton"
    if backend == "torch":
        return GenerateResult(problem_id=req.problem.id, proposer="llm", candidates=[],
                              message="the llm proposer writes kernels (triton, cuda, cute), not plain PyTorch")
    budget = LLMBudget(max_tokens=req.llm_tokens_left, max_usd=req.llm_usd_left)
    calls: list[LLMCall] = []

    def done(message: str, candidates: list[Candidate] | None = None) -> GenerateResult:
        return GenerateResult(problem_id=req.problem.id, proposer="llm", candidates=candidates or [], llm_calls=calls,
                              message=message)

    try:
        settings = LLMSettings.from_env(model=req.model)
        purpose, text, finish, prompt_sha = _converse(req, backend, settings, budget, calls)
        parsed = parse_reply(text, backend, req.parent.source if req.parent else None, finish)
    except LLMError as e:
        return done(str(e))
    except ReplyError as e:
        return done(f"the reply has no usable module ({e.kind}): {e.message}")
    origin = Origin(kind="llm", proposer="llm", model=settings.model, prompt_sha256=prompt_sha,
                    params={"purpose": purpose, "mode": parsed.mode, "repairs": parsed.repairs})
    candidate = Candidate.make(req.problem.id, backend, parsed.source, origin,
                               parent_id=req.parent.id if req.parent else None)
    if candidate.id in req.exclude_ids:
        return done(f"the reply repeats candidate {candidate.id}")
    repaired = f"; repairs: {'; '.join(parsed.repairs)}" if parsed.repairs else ""
    return done(f"{purpose} ({parsed.mode}){repaired}", [candidate])
