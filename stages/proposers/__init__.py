"""Proposers, found by name: each turns a GenerateRequest into a GenerateResult."""

from __future__ import annotations

from collections.abc import Callable

from stages.contracts import GenerateRequest, GenerateResult
from stages.proposers import builtin

PROPOSERS: dict[str, Callable[[GenerateRequest], GenerateResult]] = {"builtin": builtin.propose}
