"""The LLM endpoint's key, resolved by the flow and handed to the generate stage in its request (never stored, never
given to a stage process that runs candidate code): OPENAI_API_KEY, else the Prefect Secret block that
KERNELFLOW_LLM_SECRET_BLOCK names."""

from __future__ import annotations

import os
from typing import cast

from pydantic import SecretStr


def llm_api_key() -> SecretStr | None:
    """The key, or None when neither names one (the llm proposer then says so on its first call)."""
    if key := os.environ.get("OPENAI_API_KEY"):
        return SecretStr(key)
    if block := os.environ.get("KERNELFLOW_LLM_SECRET_BLOCK"):
        from prefect.blocks.system import Secret

        secret = Secret.load(block, _sync=True)  # type: ignore[call-arg]  # sync even when called in an event loop
        return SecretStr(str(cast(Secret, secret).get()))
    return None
