"""Patch mode: SEARCH/REPLACE blocks and unified diffs applied to a parent, tolerant of the usual slips."""

from __future__ import annotations

import pytest

from kernelflow.stages.llm.patch import (
    PatchError,
    apply_search_replace,
    apply_unified_diff,
    fenced_blocks,
    find_patch,
)

PARENT = """import torch


def scale(x):
    y = x * 2
    return y


def shift(x):
    y = x + 1
    return y
"""


def test_search_replace_exact():
    assert apply_search_replace(PARENT, [("    y = x * 2\n", "    y = x * 3\n")]) == PARENT.replace("* 2", "* 3")


def test_search_replace_tolerates_indentation_and_trailing_whitespace_and_reindents():
    blocks = [("y = x * 2   \nreturn y\n", "if x is None:\n    return x\ny = x * 3\nreturn y\n")]
    want = PARENT.replace("    y = x * 2\n", "    if x is None:\n        return x\n    y = x * 3\n")
    assert apply_search_replace(PARENT, blocks) == want


def test_search_replace_block_not_found_names_the_block_and_its_first_line():
    with pytest.raises(PatchError, match=r"SEARCH block 2 not found in the parent \(first line: 'y = x \* 5'\)"):
        apply_search_replace(PARENT, [("x * 2", "x * 3"), ("y = x * 5\n", "")])


def test_search_replace_ambiguous_block_is_refused():
    with pytest.raises(PatchError, match="SEARCH block 1 matches 2 places"):
        apply_search_replace(PARENT, [("    return y\n", "    return -y\n")])


def test_search_replace_loose_match_that_is_ambiguous_is_refused():
    with pytest.raises(PatchError, match="SEARCH block 1 matches 2 places"):
        apply_search_replace(PARENT, [("return y  \n", "return -y\n")])


DIFF = """--- a/candidate.py
+++ b/candidate.py
@@ -5,2 +5,2 @@
-    y = x * 2
+    y = x * 3
     return y
@@ -10,2 +10,3 @@
     y = x + 1
+    y = y.contiguous()
     return y
"""


def test_unified_diff_with_correct_line_numbers():
    want = PARENT.replace("* 2", "* 3").replace("x + 1\n", "x + 1\n    y = y.contiguous()\n")
    assert apply_unified_diff(PARENT, DIFF) == want


def test_unified_diff_with_wrong_line_numbers_and_no_counts():
    wrong = DIFF.replace("@@ -5,2 +5,2 @@", "@@ -40,2 +40,2 @@").replace("@@ -10,2 +10,3 @@", "@@ ... @@")
    assert apply_unified_diff(PARENT, wrong) == apply_unified_diff(PARENT, DIFF)


def test_unified_diff_picks_the_match_nearest_the_stated_line():
    diff = "@@ -11,1 +11,1 @@\n-    return y\n+    return -y\n"
    assert apply_unified_diff(PARENT, diff).endswith("    y = x + 1\n    return -y\n")


def test_unified_diff_hunk_that_does_not_match_is_refused():
    bad = DIFF.replace("     y = x + 1\n", "     y = x - 1\n")
    with pytest.raises(PatchError, match=r"hunk 2 \(@@ -10,2 \+10,3 @@\) does not match .*'y = x - 1'"):
        apply_unified_diff(PARENT, bad)


def test_find_patch_detects_each_form_and_nothing_in_a_plain_module():
    sr = "Change it:\n```python\n<<<<<<< SEARCH\nx * 2\n=======\nx * 3\n>>>>>>> REPLACE\n```\nDone."
    assert find_patch(sr) == ("search_replace", [("x * 2\n", "x * 3\n")])
    assert find_patch(f"Here:\n```diff\n{DIFF}```\nThat fuses it.") == ("diff", DIFF)
    assert find_patch(f"Here:\n\n{DIFF}\nThat fuses it.") == ("diff", DIFF)
    assert find_patch(f"```python\n{PARENT}```") is None


def test_fenced_blocks_reports_languages_and_an_unterminated_fence():
    assert fenced_blocks("a\n```py\nx = 1\n```\n```\ny\n```") == ([("py", "x = 1\n"), ("", "y\n")], False)
    assert fenced_blocks("```python\nx = 1\n")[1] is True
