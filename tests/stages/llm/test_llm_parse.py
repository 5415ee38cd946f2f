"""Parsing and repair of LLM replies: block choice, truncation, patch mode, and each deterministic repair."""

from __future__ import annotations

import ast
import importlib.util
import sys

import pytest

from kernelflow.stages.llm.parse import ReplyError, parse_reply, repair

TRITON_MODULE = """import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2.0, mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        return out
"""

CUDA_MODULE = """import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = "torch::Tensor scale(torch::Tensor x);"
ext = load_inline(name="scale", cpp_sources=cpp_source, cuda_sources=cuda_source, functions=["scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.scale(x)
"""

CUDA_KERNEL = '__global__ void scale_kernel(const float* x, float* y, int n) { printf("\\n"); }\n'


def fenced(code: str, language: str = "python") -> str:
    return f"```{language}\n{code}```"


def test_good_reply_with_one_python_block_needs_no_repair():
    parsed = parse_reply(f"Here is the kernel.\n{fenced(TRITON_MODULE)}\nIt fuses the scale.", "triton")
    assert (parsed.source, parsed.mode, parsed.repairs, parsed.blocks_found) == (TRITON_MODULE, "module", [], 1)


def test_full_module_wins_over_an_explanation_snippet():
    snippet = fenced("offs = pid * BLOCK + tl.arange(0, BLOCK)\n", "py")
    reply = f"The key line:\n{snippet}\nFull code:\n{fenced(TRITON_MODULE, '')}"
    assert parse_reply(reply, "triton").source == TRITON_MODULE


def test_cpp_block_is_inlined_as_the_name_the_python_uses_without_defining():
    parsed = parse_reply(f"{fenced(CUDA_KERNEL, 'cpp')}\n{fenced(CUDA_MODULE)}", "cuda")
    assigned = {n.targets[0].id: ast.literal_eval(n.value) for n in ast.parse(parsed.source).body[3:5]}
    assert assigned["cuda_source"] == CUDA_KERNEL
    assert parsed.source.index("cuda_source =") < parsed.source.index("ext = load_inline")
    assert parsed.repairs == ["inlined the ```cpp block as `cuda_source` (the Python used it without defining it)"]


def test_prose_only_reply_has_no_code():
    with pytest.raises(ReplyError, match="no_code") as err:
        parse_reply("I would fuse the scale into the load, using a block size of 1024.", "triton")
    assert err.value.kind == "no_code"


def test_reply_with_only_a_cpp_block_has_no_python_code():
    with pytest.raises(ReplyError, match=r"no Python code block \(only: cuda\)"):
        parse_reply(fenced(CUDA_KERNEL, "cuda"), "cuda")


def test_bare_module_without_a_fence_is_used_whole():
    parsed = parse_reply(f"Here you go:\n{TRITON_MODULE}", "triton")
    assert (parsed.source, parsed.repairs, parsed.blocks_found) == (TRITON_MODULE, ["the reply had no code fence"], 0)


def test_unterminated_fence_is_truncated():
    with pytest.raises(ReplyError, match="unterminated") as err:
        parse_reply(f"Here:\n```python\n{TRITON_MODULE[:300]}", "triton")
    assert err.value.kind == "truncated"


def test_finish_reason_length_is_truncated_even_with_closed_fences():
    with pytest.raises(ReplyError, match="truncated: the reply stopped at the token limit"):
        parse_reply(fenced(TRITON_MODULE), "triton", finish_reason="length")


def test_missing_imports_are_added_after_the_docstring():
    bare = "\n".join(line for line in TRITON_MODULE.split("\n") if not line.startswith("import "))
    source, repairs = repair(f'"""Scale."""\n{bare}', "triton")
    assert repairs == [f"added `{s}`" for s in ("import torch", "import torch.nn as nn", "import triton",
                                                 "import triton.language as tl")]
    assert source.startswith('"""Scale."""\nimport torch\nimport torch.nn as nn\nimport triton\n')


def test_missing_functional_math_and_load_inline_imports_are_added():
    code = "class ModelNew(nn.Module):\n    def forward(self, x):\n        return F.relu(x) * math.pi + load_inline\n"
    imports = ["import torch.nn as nn", "import torch.nn.functional as F", "import math",
               "from torch.utils.cpp_extension import load_inline"]
    assert repair(code, "cuda")[1] == [f"added `{s}`" for s in imports]


def test_misnamed_class_is_renamed_with_its_references():
    named = TRITON_MODULE.replace("super()", "super(ModelNew, self)")
    source, repairs = repair(named.replace("ModelNew", "Model_new"), "triton")
    assert (source, repairs) == (named, ["renamed class Model_new to ModelNew"])


def test_last_of_several_model_classes_is_renamed():
    code = TRITON_MODULE.replace("class ModelNew", "class Model") + "\n\nclass Plain(Model):\n    pass\n"
    code += "\n\nclass Fast(nn.Module):\n    def forward(self, x):\n        return x\n"
    source, repairs = repair(code, "triton")
    assert "class ModelNew(nn.Module)" in source and "class Model(nn.Module)" in source
    assert repairs == ["renamed class Fast to ModelNew (the last of 2 classes with a forward)"]


def test_alias_assignment_counts_as_model_new():
    assert repair(TRITON_MODULE.replace("ModelNew", "Fast") + "\nModelNew = Fast\n", "triton")[1] == []


def test_no_class_with_forward_is_no_model_new():
    with pytest.raises(ReplyError, match="no_model_new") as err:
        parse_reply(fenced("import torch\n\n\ndef scale(x):\n    return x * 2\n"), "triton")
    assert err.value.kind == "no_model_new"


def test_missing_super_init_is_inserted_after_the_docstring():
    code = TRITON_MODULE.replace("        super().__init__()\n", '        """Scale by two."""\n        self.k = 2\n')
    source, repairs = repair(code, "triton")
    assert '"""Scale by two."""\n        super().__init__()\n        self.k = 2\n' in source
    assert repairs == ["inserted `super().__init__()` at the start of ModelNew.__init__"]


@pytest.mark.parametrize("slip", ["@triton.jit()", "@tl.jit"])
def test_triton_decorator_slips_are_fixed(slip):
    source, repairs = repair(TRITON_MODULE.replace("@triton.jit", slip), "triton")
    assert (source, repairs) == (TRITON_MODULE, [f"changed `{slip}` to `@triton.jit` on scale_kernel"])


def test_undecorated_kernel_is_decorated_and_imports_follow():
    code = TRITON_MODULE.replace("@triton.jit\n", "").replace("import triton\n", "")
    source, repairs = repair(code, "triton")
    imports = "import triton\nimport triton.language as tl"
    swapped = TRITON_MODULE.replace(imports, "\n".join(reversed(imports.split("\n"))))
    assert source == swapped  # added after the existing imports
    assert repairs == ["added `@triton.jit` to scale_kernel (it uses tl.program_id but had no decorator)",
                       "added `import triton`"]


def test_decorator_fixes_apply_to_the_triton_backend_only():
    assert repair(TRITON_MODULE.replace("@triton.jit", "@tl.jit"), "cuda")[1] == []


def test_code_that_does_not_parse_is_no_code_with_the_syntax_error():
    with pytest.raises(ReplyError, match=r"no_code: the code does not parse: .* \(line 13\)"):
        parse_reply(fenced(TRITON_MODULE.replace("(nn.Module):", "(nn.Module)")), "triton")


def test_repaired_triton_module_imports(tmp_path):
    slipped = TRITON_MODULE.replace("@triton.jit", "@triton.jit()").replace("class ModelNew", "class NewModel")
    slipped = slipped.replace("import triton.language as tl\n", "").replace("super().__init__()", "pass")
    parsed = parse_reply(fenced(slipped), "triton")
    path = tmp_path / "candidate_repaired.py"
    path.write_text(parsed.source)
    spec = importlib.util.spec_from_file_location("candidate_repaired", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # Triton reads the kernel's source through its module
    try:
        spec.loader.exec_module(module)
        assert len(parsed.repairs) == 4 and isinstance(module.ModelNew(), module.nn.Module)
    finally:
        del sys.modules[spec.name]


SEARCH_REPLACE = """Double the block size:
```python
<<<<<<< SEARCH
        scale_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
=======
        scale_kernel[(triton.cdiv(x.numel(), 2048),)](x, out, x.numel(), BLOCK=2048)
>>>>>>> REPLACE
```
This halves the number of programs."""


def test_patch_mode_applies_search_replace_to_the_parent():
    parsed = parse_reply(SEARCH_REPLACE, "triton", parent_source=TRITON_MODULE)
    assert (parsed.source, parsed.mode, parsed.repairs) == (TRITON_MODULE.replace("1024", "2048"), "patch", [])


def test_patch_wins_over_a_full_module_in_the_same_reply():
    reply = f"{SEARCH_REPLACE}\nFor reference, the old code:\n{fenced(TRITON_MODULE)}"
    assert parse_reply(reply, "triton", parent_source=TRITON_MODULE).mode == "patch"


def test_patch_mode_applies_a_unified_diff_with_wrong_line_numbers_then_repairs():
    diff = "@@ -3,2 +3,1 @@\n import triton\n-import triton.language as tl\n"
    diff += "@@ -99 +99 @@\n-@triton.jit\n+@triton.jit()\n"
    parsed = parse_reply(f"Shorter imports:\n```diff\n{diff}```", "triton", parent_source=TRITON_MODULE)
    assert (parsed.source, parsed.mode) == (TRITON_MODULE, "patch")
    assert parsed.repairs == ["changed `@triton.jit()` to `@triton.jit` on scale_kernel",
                              "added `import triton.language as tl`"]


def test_patch_that_does_not_apply_is_patch_failed():
    with pytest.raises(ReplyError, match="patch_failed: SEARCH block 1 not found") as err:
        parse_reply(SEARCH_REPLACE, "triton", parent_source=TRITON_MODULE.replace("1024", "512"))
    assert err.value.kind == "patch_failed"


def test_patch_without_a_parent_is_patch_failed():
    with pytest.raises(ReplyError, match="patch_failed: the reply is a patch but there is no parent"):
        parse_reply(SEARCH_REPLACE, "triton")


def test_full_module_reply_to_a_patch_request_is_used_as_a_module():
    parsed = parse_reply(fenced(TRITON_MODULE.replace("1024", "4096")), "triton", parent_source=TRITON_MODULE)
    assert (parsed.mode, parsed.source) == ("module", TRITON_MODULE.replace("1024", "4096"))
