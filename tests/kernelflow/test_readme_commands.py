"""Every command README.md shows in its shell blocks still parses: a `kernelflow` (or `.venv/bin/kernelflow`) line
is accepted by the CLI's own argument parser (nothing is run), a `make` line names targets the Makefile has. `make`
targets named in the prose are checked too."""

import re
import shlex
from pathlib import Path

import pytest

from kernelflow.cli import parser

ROOT = Path(__file__).resolve().parents[2]
FENCED = re.compile(r"^```(?:sh|bash|shell|console)?\n(.*?)^```", re.S | re.M)
RULE = re.compile(r"^([A-Za-z0-9_.-][A-Za-z0-9_. -]*?)\s*:(?!=)", re.M)  # `a b: deps`, not `X := value`


def shown_commands(markdown: str) -> list[list[str]]:
    """The fenced shell lines (continuations joined, comments dropped) that start with make or kernelflow."""
    commands = []
    for block in FENCED.findall(markdown):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words and words[0] in ("make", "kernelflow", ".venv/bin/kernelflow"):
                commands.append(words)
    return commands


def make_targets() -> set[str]:
    return {name for names in RULE.findall((ROOT / "Makefile").read_text()) for name in names.split()}


README = (ROOT / "README.md").read_text()
COMMANDS = shown_commands(README)


def test_the_readme_shows_commands_of_both_kinds():
    kinds = {words[0] for words in COMMANDS}
    assert {"make", ".venv/bin/kernelflow"} <= kinds and len(COMMANDS) >= 10


@pytest.mark.parametrize("words", [w for w in COMMANDS if w[0] != "make"], ids=" ".join)
def test_a_kernelflow_command_of_the_readme_parses(words: list[str], capsys):
    try:
        args = parser().parse_args(words[1:])
    except SystemExit:
        pytest.fail(f"README: `{' '.join(words)}` does not parse: {capsys.readouterr().err.strip().splitlines()[-1]}")
    assert callable(args.fn)


def test_every_make_target_the_readme_names_is_in_the_makefile():
    targets = make_targets()
    assert {"demo", "test", "install"} <= targets  # the rule pattern finds the Makefile's rules
    named = {w for words in COMMANDS if words[0] == "make" for w in words[1:] if "=" not in w and w[0] != "-"}
    named |= set(re.findall(r"`make ([a-z][a-z0-9-]*)", README))
    assert named and not named - targets, f"not targets of the Makefile: {sorted(named - targets)}"


def test_a_command_that_does_not_parse_is_caught():
    """The check itself: a wrong option value, a missing argument and an unknown command all fail to parse."""
    for words in (["optimize", "p.py", "--backend", "triton|cuda|cute"], ["verify", "p.py"], ["optimise", "p.py"]):
        with pytest.raises(SystemExit):
            parser().parse_args(words)
    assert shown_commands("```sh\n.venv/bin/kernelflow show latest   # a comment\nexport A=1\nmake a \\\n  b\n```\n") \
        == [[".venv/bin/kernelflow", "show", "latest"], ["make", "a", "b"]]
