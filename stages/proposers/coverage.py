"""Which template families of the builtin proposer match a problem, and why the others refuse it.

`coverage(problem)` asks every family exactly as the builtin proposer does (one trace of the reference on meta
tensors, then each family's match), so it runs on a CPU without a GPU and takes well under a second a problem. A
reference that the tracer refuses, or that breaks it, is every family's refusal with that reason, never an
exception. `scan(paths)` does it for problem files (a file that does not load is an entry with its error), and
`summary(folder, entries)` says how many problems have at least one family and which refusals are the most common
among those that have none. A run keeps its problem's coverage in its runs row (RunRecord.coverage).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelflow.stages.contracts import Coverage, Device, GenerateRequest, Problem
from kernelflow.stages.errors import ProblemError
from kernelflow.stages.problems.kernelbench import load_problem
from kernelflow.stages.proposers.builtin import LEFT_OUT, _plans
from kernelflow.stages.proposers.builtin import families as asked
from kernelflow.stages.templates import TEMPLATES

TOP_REASONS = 3  # refusal reasons a folder's summary names


def coverage(problem: Problem, device: Device | None = None, families: list[str] | None = None) -> Coverage:
    """The families that match `problem` (under its policy) for `device` (None: cuda where a GPU is visible, else
    cpu) and, per family that does not, its reason; of `families` only (None: all), the others left out unasked."""
    asked(families)  # an unknown family is the caller's error, not the reference's
    try:
        plans, reasons = _plans(GenerateRequest(problem=problem, n=1, device=device, families=families))
    except (Exception, SystemExit) as e:  # the reference breaks the tracer: the same reason for every family
        plans, reasons = {}, [f"tracing the reference failed: {type(e).__name__}: {e}"]
    refused: dict[str, str] = {}
    shared = []  # reasons no family claims: the tracer's, which every family shares
    for reason in reasons:
        family = next((f for f in TEMPLATES if reason.startswith(f + ": ")), None)
        if family is None:
            shared.append(reason)
        else:
            refused[family] = reason.removeprefix(family + ": ")
    for family in TEMPLATES:
        if family not in plans and family not in refused:
            refused[family] = "; ".join(shared) or "no reason given"
    return Coverage(matched=[f for f in TEMPLATES if f in plans], refused={f: refused[f] for f in TEMPLATES
                                                                            if f in refused})


@dataclass(frozen=True)
class Entry:
    """One problem file's coverage, or why it could not be loaded (then `coverage` is None)."""

    path: Path
    problem_id: str
    coverage: Coverage | None
    error: str = ""


def scan(paths: list[Path], device: Device | None = None, families: list[str] | None = None) -> list[Entry]:
    """The coverage of each problem file (a SOL-ExecBench definition already translated to its module) for `device`,
    of `families` (None: all)."""
    entries = []
    for path in paths:
        try:
            problem = load_problem(path)
        except ProblemError as e:
            entries.append(Entry(path, path.stem, None, str(e)))
            continue
        entries.append(Entry(path, problem.id, coverage(problem, device, families)))
    return entries


def gist(reason: str) -> str:
    """A reason without its particulars (a trailing parenthesis such as the node's text, shapes, numbers), so that
    problems refused for one cause count together."""
    if reason.endswith(")"):  # from the parenthesis that the last one closes
        depth = 0
        for i in range(len(reason) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(reason[i], 0)
            if depth == 0:
                reason = reason[:i].rstrip()
                break
    reason = re.sub(r"\[[^\]]*\]", "[...]", reason)
    return re.sub(r"\b\d+\b", "N", reason)


def summary(folder: str, entries: list[Entry]) -> str:
    """One line: problems with at least one family of those that load, and the most common refusals among the
    problems with none. A problem's refusal is the reason most of its families give (ties: the first family's in
    registry order), as a reason several families share is the common lowering's (an op none of them takes) while
    the others mostly say the problem is not of their kind; families the request left out are not counted."""
    loaded = [e for e in entries if e.coverage is not None]
    covered = [e for e in loaded if e.coverage and e.coverage.matched]
    line = f"{folder}: {len(covered)} of {len(loaded)} problems with at least one family"
    if len(loaded) < len(entries):
        line += f" ({len(entries) - len(loaded)} more do not load)"
    blockers: Counter[str] = Counter()
    for entry in loaded:
        asked = [r for r in (entry.coverage.refused.values() if entry.coverage else []) if not r.startswith(LEFT_OUT)]
        if entry.coverage is not None and not entry.coverage.matched and asked:
            blockers[Counter(gist(r) for r in asked).most_common(1)[0][0]] += 1
    if blockers:
        top = [f"{reason!r} ({n})" for reason, n in blockers.most_common(TOP_REASONS)]
        line += f"; the most common refusals of the {len(loaded) - len(covered)} without: " + "; ".join(top)
    return line
