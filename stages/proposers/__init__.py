"""Proposers, found by name: each turns a GenerateRequest into a GenerateResult. REPAIRS says which failures
each can repair when the flow hands it a failed parent (GenerateRequest.parent_failure)."""

from __future__ import annotations

from collections.abc import Callable

from kernelflow.stages.contracts import FailureKind, GenerateRequest, GenerateResult
from kernelflow.stages.proposers import builtin, llm

PROPOSERS: dict[str, Callable[[GenerateRequest], GenerateResult]] = {"builtin": builtin.propose, "llm": llm.propose}

# builtin: an accuracy failure gets its family's more precise variant (mutations.py, raise_precision); the llm
# debugs every candidate fault but cheating and a backend that cannot run here.
REPAIRS: dict[str, frozenset[FailureKind]] = {
    "builtin": frozenset({"mismatch"}),
    "llm": frozenset({"compile_error", "import_error", "signature_mismatch", "runtime_error", "illegal_address", "oom",
                      "timeout", "crash", "mismatch", "nan", "all_zero", "input_mutation", "nondeterministic",
                      "policy_violation"}),
}
