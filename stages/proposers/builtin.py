"""The builtin (LLM-free) proposer: recognize the computation, instantiate template families.

Variants come best guess first; a request's seed rotates that order, and a parent from the same family
puts the variants nearest its parameters first. A problem no family matches gets zero candidates and the
families' reasons.
"""

from __future__ import annotations

import math
from typing import Any

from stages.contracts import Candidate, GenerateRequest, GenerateResult, Origin
from stages.problem import import_problem
from stages.templates import TEMPLATES
from stages.templates.lowering import trace
from stages.templates.program import Plan, TemplateMismatch


def _distance(params: dict[str, Any], parent: dict[str, Any]) -> float:
    """Steps in log2 between numeric parameters (neighbouring tiles and warps are 1 apart)."""
    return sum(abs(math.log2(v / parent[k])) for k, v in params.items()
               if isinstance(v, int) and isinstance(parent.get(k), int) and v > 0 and parent[k] > 0)


def _ordered(family: str, plan: Plan, req: GenerateRequest) -> list[dict[str, Any]]:
    params = TEMPLATES[family].variants(plan)
    shift = req.seed % len(params)
    params = params[shift:] + params[:shift]
    if req.parent is not None and req.parent.origin.proposer == family:
        parent = req.parent.origin.params
        params = sorted((p for p in params if p != parent), key=lambda p: _distance(p, parent))
    return params


def _plans(req: GenerateRequest) -> tuple[dict[str, Plan], list[str]]:
    try:  # one trace for every family
        traced = trace(req.problem, import_problem(req.problem.path))
    except TemplateMismatch as e:
        return {}, [e.reason]
    plans, reasons = {}, []
    for family, template in TEMPLATES.items():
        try:
            plans[family] = template.match(req.problem, traced)
        except TemplateMismatch as e:
            reasons.append(f"{family}: {e.reason}")
    return plans, reasons


def propose(req: GenerateRequest) -> GenerateResult:
    if req.backend not in (None, "triton"):
        return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=[],
                              message=f"the builtin templates write Triton, not {req.backend}")
    plans, reasons = _plans(req)
    if not plans:
        return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=[],
                              message="no template family matches: " + "; ".join(reasons))
    candidates: list[Candidate] = []
    seen = set(req.exclude_ids)
    parent_id = req.parent.id if req.parent is not None else None
    variants = [(family, params) for family, plan in plans.items() for params in _ordered(family, plan, req)]
    for family, params in variants:
        if len(candidates) == req.n:
            break
        source = TEMPLATES[family].render(plans[family], params)
        candidate = Candidate.make(req.problem.id, "triton", source, Origin(kind="builtin", proposer=family,
                                                                          params=params), parent_id=parent_id)
        if candidate.id not in seen:
            seen.add(candidate.id)
            candidates.append(candidate)
    message = "" if len(candidates) == req.n else (
        f"{len(candidates)} of {req.n}: the families have {len(variants)} variants, "
        f"{len(variants) - len(candidates)} of them excluded as already tried")
    return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=candidates, message=message)
