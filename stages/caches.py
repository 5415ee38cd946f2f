"""The compile caches a stage process may write besides its work dir, as the environment names them: one list for
the in-process audit (stages/harness/audit.py) and the kernel's write confinement (stages/executors/sandbox.py)."""

from __future__ import annotations

import getpass
import os
import re
import site
import tempfile
from collections.abc import Mapping

OPTIONAL = ("TRITON_CACHE_DIR", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR")  # Triton's, where set


def named(env: Mapping[str, str]) -> dict[str, str]:
    """The caches at the places they have under the caller's home, named so that a stage process with a home of its
    own still finds them warm."""
    home = os.path.expanduser("~")
    inductor = os.path.join(tempfile.gettempdir(), "torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", getpass.getuser()))
    return {"TRITON_HOME": env.get("TRITON_HOME", home),
            "CUDA_CACHE_PATH": env.get("CUDA_CACHE_PATH", os.path.join(home, ".nv", "ComputeCache")),
            "TORCHINDUCTOR_CACHE_DIR": env.get("TORCHINDUCTOR_CACHE_DIR", inductor),  # as torch computes it
            "TORCH_EXTENSIONS_DIR": env.get("TORCH_EXTENSIONS_DIR", os.path.join(home, ".cache", "torch_extensions")),
            "PYTHONUSERBASE": env.get("PYTHONUSERBASE", site.getuserbase())}


def writable(env: Mapping[str, str]) -> list[str]:
    """The cache directories a stage process may write beneath: Triton's, CUDA's JIT cache, inductor's, torch's
    extension builds."""
    caches = named(env)
    return [os.path.join(caches["TRITON_HOME"], ".triton"), caches["CUDA_CACHE_PATH"],
            caches["TORCHINDUCTOR_CACHE_DIR"], caches["TORCH_EXTENSIONS_DIR"]] + [env[k] for k in OPTIONAL if env.get(k)]
