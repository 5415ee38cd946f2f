"""The builtin (LLM-free) proposer: recognize the computation, instantiate template families.

Variants come best guess first, the matching families taking turns (so a search of a few candidates sees every
family), on the GPU torch.compile's own code first (FIRST_ON_GPU: the floor the templates have to beat); a
request's seed rotates that order. A parent from a matching family makes its family take its turn
last (the others get their best guess tried before local tuning) with the variants nearest the parent first.
With the parent's profile actions (GenerateRequest.actions), its family proposes first what those actions
suggest (stages/proposers/mutations.py), then the parent's plain neighbours, then the nearest variants. A parent
that failed verification for accuracy (parent_failure) gets the raise_precision action.
A problem no family matches gets zero candidates and the families' reasons.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

from kernelflow.stages.contracts import (
    Action,
    Candidate,
    Device,
    GenerateRequest,
    GenerateResult,
    Origin,
    Problem,
)
from kernelflow.stages.problems.kernelbench import import_problem
from kernelflow.stages.proposers import mutations
from kernelflow.stages.templates import TEMPLATES
from kernelflow.stages.templates.lowering import Traced, trace
from kernelflow.stages.templates.program import Plan, TemplateMismatch

LEFT_OUT = "left out by the request"  # the reason of a family the request does not ask: not a refusal
# Proposed first on the GPU: torch.compile's code for the problem, the baseline the other families set out to beat,
# so that a search cut short by its budget has it. On the CPU it keeps its registry place (late): Triton's
# interpreter runs Inductor's reductions slowly there.
FIRST_ON_GPU = "inductor"


def _distance(params: dict[str, Any], parent: dict[str, Any]) -> float:
    """Steps in log2 between numeric parameters (neighbouring tiles and warps are 1 apart)."""
    return sum(abs(math.log2(v / parent[k])) for k, v in params.items()
               if isinstance(v, int) and isinstance(parent.get(k), int) and v > 0 and parent[k] > 0)


def _ordered(family: str, plan: Plan, req: GenerateRequest, notes: list[str]) -> list[dict[str, Any]]:
    params = TEMPLATES[family].variants(plan)
    if req.parent is not None and req.parent.origin.proposer == family:
        shift = req.seed % len(params)  # breaks ties in distance
        parent = req.parent.origin.params
        nearest = sorted((p for p in params[shift:] + params[:shift] if p != parent), key=lambda p: _distance(p, parent))
        moved: list[dict[str, Any]] = []
        for action in req.actions:  # the tools' actions first, causes before symptoms, as refine ordered them
            sets = [p for p in mutations.apply(action, parent) if p not in moved]
            moved += sets
            notes.append(f"{action.kind}: {len(sets)} parameter sets" if sets else mutations.why_not(action, parent))
        moved += [p for p in mutations.explore(parent) if p not in moved] if req.actions else []
        params = moved + [p for p in nearest if p not in moved]
    return params


def _turns(plans: dict[str, Plan], req: GenerateRequest, notes: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(family, params) in proposal order: round robin over the families, on the GPU FIRST_ON_GPU first, the
    parent's family last."""
    refined = req.parent.origin.proposer if req.parent is not None else None
    first = FIRST_ON_GPU if device_of(req) == "cuda" else None
    families = sorted(plans, key=lambda family: (family == refined, family != first))
    lists = [[(family, p) for p in _ordered(family, plans[family], req, notes)] for family in families]
    turns = [turn for row in itertools.zip_longest(*lists) for turn in row if turn is not None]
    if refined in plans:
        return turns
    shift = req.seed % max(len(turns), 1)
    return turns[shift:] + turns[:shift]


def device_of(req: GenerateRequest) -> Device:
    """The device the request generates for: its own, else cuda where a GPU is visible, else cpu."""
    import torch

    return req.device or ("cuda" if torch.cuda.is_available() else "cpu")


def families(names: list[str] | None) -> list[str]:
    """The template families a request names (None: all), in registry order; an unknown name is a ValueError."""
    if names is not None and (unknown := sorted(set(names) - set(TEMPLATES))):
        raise ValueError(f"unknown template families {unknown}; known: {', '.join(TEMPLATES)}")
    return [f for f in TEMPLATES if names is None or f in names]


def _plans(req: GenerateRequest) -> tuple[dict[str, Plan], list[str]]:
    """Each matching family's plan, and the others' reasons; a family the request leaves out is not asked. A family
    with TARGETED takes the device too and does not need the trace (it matches when tracing fails)."""
    asked = families(req.families)
    try:  # one trace for every family
        traced, untraced = trace(req.problem, import_problem(req.problem.path)), ""
    except TemplateMismatch as e:
        traced, untraced = None, e.reason
    plans, reasons = {}, [untraced] if untraced else []
    reasons += [f"{family}: {LEFT_OUT} (families: {', '.join(asked)})"
                for family in TEMPLATES if family not in asked]
    for family in asked:
        try:
            if traced is not None or getattr(TEMPLATES[family], "TARGETED", False):
                plans[family] = plan(family, req.problem, device_of(req), traced)
        except TemplateMismatch as e:
            reasons.append(f"{family}: {e.reason}")
    return plans, reasons


def plan(family: str, problem: Problem, device: Device, traced: Traced | None = None) -> Plan:
    """A family's plan for the problem: a family with TARGETED generates for `device` and needs no trace; the
    others match the trace (traced here when not given). TemplateMismatch with the reason."""
    template = TEMPLATES[family]
    if getattr(template, "TARGETED", False):
        return template.match(problem, traced, device)
    return template.match(problem, traced if traced is not None else trace(problem, import_problem(problem.path)))


def propose(req: GenerateRequest) -> GenerateResult:
    if req.backend not in (None, "triton"):
        return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=[],
                              message=f"the builtin templates write Triton, not {req.backend}")
    if req.parent_failure is not None:  # the flow hands a failed parent only for what REPAIRS lists: mismatch
        req = req.model_copy(update={"actions": [Action(kind="raise_precision")]})
    plans, reasons = _plans(req)
    if not plans:
        return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=[],
                              message="no template family matches: " + "; ".join(reasons))
    candidates: list[Candidate] = []
    seen = set(req.exclude_ids)
    parent_id = req.parent.id if req.parent is not None else None
    notes: list[str] = []
    skipped: list[str] = []  # variants that did not render
    variants = _turns(plans, req, notes)
    for family, params in variants:
        if len(candidates) == req.n:
            break
        try:  # a variant that regenerates code (inductor's choices) may not apply
            source = TEMPLATES[family].render(plans[family], params)
        except TemplateMismatch as e:
            skipped.append(f"{family}: {e.reason}")
            continue
        candidate = Candidate.make(req.problem.id, "triton", source, Origin(kind="builtin", proposer=family,
                                                                          params=params), parent_id=parent_id)
        if candidate.id not in seen:
            seen.add(candidate.id)
            candidates.append(candidate)
    message = "" if len(candidates) == req.n else (
        f"{len(candidates)} of {req.n}: the families have {len(variants)} variants, "
        f"{len(variants) - len(candidates)} of them excluded as already tried")
    if notes:
        message = "; ".join(filter(None, [message, "from the parent's profile: " + "; ".join(notes)]))
    if skipped:
        message = "; ".join(filter(None, [message, "variants that do not apply: " + "; ".join(skipped)]))
    return GenerateResult(problem_id=req.problem.id, proposer="builtin", candidates=candidates, message=message)
