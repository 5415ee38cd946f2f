"""code_version: the commit of the project's own repository, never that of a repository it lies inside."""

import importlib.util
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelflow.stages.measure.provenance import code_version

ROOT = Path(__file__).resolve().parents[3]


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t", "-c",
                           "commit.gpgsign=false", *args], capture_output=True, text=True, check=True).stdout.strip()


def committed_repository(path: Path) -> str:
    """`git init` at path, everything under it committed; the commit's short hash."""
    git(path, "init", "-q")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "one")
    return git(path, "rev-parse", "--short=12", "HEAD")


def project_copy(root: Path) -> Callable[[], str]:
    """A copy of the project's layout (pyproject.toml, stages/measure/provenance.py) at root; its code_version."""
    (root / "stages" / "measure").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", root)
    shutil.copy(ROOT / "stages" / "measure" / "provenance.py", root / "stages" / "measure")
    spec = importlib.util.spec_from_file_location(f"provenance_copy_{abs(hash(root))}",
                                                  root / "stages" / "measure" / "provenance.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.code_version


def test_a_copy_inside_another_repository_is_unknown_or_its_stamp(tmp_path: Path, monkeypatch):
    version = project_copy(tmp_path / "project")
    (tmp_path / "other.txt").write_text("another project's file\n")
    other = committed_repository(tmp_path)  # the copy lies inside, committed with it
    monkeypatch.delenv("KERNELFLOW_CODE_VERSION", raising=False)
    assert version() == "unknown" and other not in version()
    version.cache_clear()
    monkeypatch.setenv("KERNELFLOW_CODE_VERSION", "stamped-1")
    assert version() == "stamped-1"


def test_a_copy_that_is_its_own_repository_has_its_commit(tmp_path: Path, monkeypatch):
    version = project_copy(tmp_path / "project")
    commit = committed_repository(tmp_path / "project")
    monkeypatch.setenv("GIT_DIR", str(ROOT / ".git"))  # a git hook's: must not point git at this checkout
    assert version() == commit
    (tmp_path / "project" / "pyproject.toml").write_text("changed\n")
    version.cache_clear()
    assert version() == commit + "-dirty"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="this tree is no git checkout")
def test_the_checkout_has_its_head():
    assert code_version().removesuffix("-dirty") == git(ROOT, "rev-parse", "--short=12", "HEAD")
