"""Patch mode: apply an LLM's SEARCH/REPLACE blocks or unified diff to the parent candidate's source.

Both forms tolerate the usual slips of a model: SEARCH text whose indentation or trailing whitespace
differs from the parent (matched line by line, the replacement re-indented to the match), and @@ headers
with wrong line numbers (each hunk is located by its context and removed lines, nearest the stated
position first). Anything that cannot be placed exactly once raises PatchError naming the block or hunk.
"""

from __future__ import annotations

import re

from kernelflow.stages.errors import KernelflowError

SEARCH_REPLACE = re.compile(
    r"^<{5,9} ?SEARCH[^\n]*\n(.*?)^={5,9}[ \t]*\n(.*?)^>{5,9} ?REPLACE[^\n]*$", re.MULTILINE | re.DOTALL
)
FENCE_OPEN = re.compile(r"^[ \t]*```+[ \t]*([\w+.#-]*)")
HUNK_HEADER = re.compile(r"^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@")
DIFF_LINE = re.compile(r"^(?:[ +\-\\@]|$)")


class PatchError(KernelflowError):
    """A patch does not apply to the parent; the message names the block or hunk and why."""

    def __init__(self, what: str, why: str):
        self.what, self.why = what, why
        super().__init__(f"{what} {why}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")[:80]


def _indent(lines: list[str]) -> str:
    """The indentation common to the non-blank lines."""
    prefixes = [line[: len(line) - len(line.lstrip())] for line in lines if line.strip()]
    common = min(prefixes, key=len, default="")
    while common and not all(p.startswith(common) for p in prefixes):
        common = common[:-1]
    return common


def _normalized(lines: list[str]) -> list[str]:
    cut = len(_indent(lines))
    return [line.rstrip()[cut:] for line in lines]


def _trim_blank(lines: list[str]) -> list[str]:
    start = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    end = max((i + 1 for i, line in enumerate(lines) if line.strip()), default=start)
    return lines[start:end]


def _reindent(line: str, old: str, new: str) -> str:
    if not line.strip():
        return ""
    return new + (line[len(old) :] if line.startswith(old) else line.lstrip())


def _replace_loose(text: str, search: str, replace: str, name: str) -> str:
    """Line-wise match ignoring trailing whitespace and common indentation; re-indent the replacement."""
    lines, wanted = text.split("\n"), _trim_blank(search.split("\n"))
    if not wanted:
        raise PatchError(name, "is empty")
    key, n = _normalized(wanted), len(wanted)
    hits = [i for i in range(len(lines) - n + 1) if _normalized(lines[i : i + n]) == key]
    if len(hits) != 1:
        why = "not found in the parent" if not hits else f"matches {len(hits)} places in the parent"
        raise PatchError(name, f"{why} (first line: {_first_line(search)!r})")
    at, old_indent = hits[0], _indent(wanted)
    new_indent = _indent(lines[at : at + n])
    body = [_reindent(line, old_indent, new_indent) for line in _trim_blank(replace.split("\n"))]
    return "\n".join(lines[:at] + body + lines[at + n :])


def apply_search_replace(parent: str, blocks: list[tuple[str, str]]) -> str:
    """Apply (search, replace) pairs in order; each search must occur exactly once in the current text."""
    text = parent
    for number, (search, replace) in enumerate(blocks, 1):
        name = f"SEARCH block {number}"
        count = text.count(search) if search else 0
        if count > 1:
            first = _first_line(search)
            raise PatchError(name, f"matches {count} places in the parent (first line: {first!r})")
        text = text.replace(search, replace, 1) if count == 1 else _replace_loose(text, search, replace, name)
    return text


def _hunks(diff: str) -> list[tuple[str, int | None, list[str]]]:
    """(header, stated old start, body lines) per hunk; file headers and '\\ No newline' markers dropped."""
    hunks: list[tuple[str, int | None, list[str]]] = []
    for line in diff.split("\n"):
        if line.startswith("@@"):
            stated = HUNK_HEADER.match(line)
            hunks.append((line.strip(), int(stated.group(1)) if stated else None, []))
        elif hunks and not line.startswith(("\\", "--- ", "+++ ")):
            hunks[-1][2].append(line)
    return [(header, start, _strip_trailing_empty(body)) for header, start, body in hunks]


def _strip_trailing_empty(body: list[str]) -> list[str]:
    while body and body[-1] == "":
        body = body[:-1]
    return body


def apply_unified_diff(parent: str, diff: str) -> str:
    """Apply the hunks in order, each placed by its context and removed lines, nearest the stated line."""
    hunks = _hunks(diff)
    if not hunks:
        raise PatchError("the diff", "holds no @@ hunk")
    lines, shift, cursor = parent.split("\n"), 0, 0
    for number, (header, stated, body) in enumerate(hunks, 1):
        old = [line[1:] for line in body if not line.startswith("+")]
        new = [line[1:] for line in body if not line.startswith("-")]
        expected = cursor if stated is None else max(stated - 1 + shift, 0)
        key, n = [line.rstrip() for line in old], len(old)
        hits = [i for i in range(len(lines) - n + 1) if [line.rstrip() for line in lines[i : i + n]] == key]
        if not hits:
            first = _first_line("\n".join(old))
            why = f"does not match the parent (first line: {first!r})"
            raise PatchError(f"hunk {number} ({header})", why)
        at = min(hits, key=lambda i: (abs(i - expected), i))
        lines[at : at + n] = new
        shift, cursor = shift + len(new) - n, at + len(new)
    return "\n".join(lines)


def fenced_blocks(text: str) -> tuple[list[tuple[str, str]], bool]:
    """(language, body) per ``` fence in order, and whether the last fence is left open (a cut-off reply)."""
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in text.split("\n"):
        opening = FENCE_OPEN.match(line)
        if language is None and opening:
            language, body = opening.group(1).lower(), []
        elif language is not None and opening and not line.strip().strip("`"):
            blocks.append((language, "\n".join(body) + "\n"))
            language = None
        elif language is not None:
            body.append(line)
    return blocks, language is not None


def _raw_diff(text: str) -> str | None:
    """An unfenced diff: from the first ---/@@ line while lines look like a diff."""
    lines = text.split("\n")
    if not any(line.startswith("@@") for line in lines):
        return None
    start = next(i for i, line in enumerate(lines) if line.startswith(("--- ", "@@")))
    end = start
    while end < len(lines) and DIFF_LINE.match(lines[end]):
        end += 1
    return "\n".join(lines[start:end])


def find_patch(text: str) -> tuple[str, list[tuple[str, str]] | str] | None:
    """("search_replace", blocks) or ("diff", diff text) when the reply holds a patch, else None."""
    blocks = [(m.group(1), m.group(2)) for m in SEARCH_REPLACE.finditer(text)]
    if blocks:
        return "search_replace", blocks
    fences = fenced_blocks(text)[0]
    diff = next((body for lang, body in fences if lang in ("diff", "patch", "udiff")), None)
    diff = diff or next((body for _, body in fences if re.search(r"^@@", body, re.MULTILINE)), None)
    diff = diff or _raw_diff(text)
    return ("diff", diff) if diff else None
