"""Content-addressed blobs in a local directory: blobs/ab/abcdef... (sha256 of the bytes). Writes are atomic.
What a stage call made (its result's `files`) becomes blobs here (`keep_files`)."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from kernelflow.stages.contracts import StageResult


def blob_path(blob_dir: str | Path, sha: str) -> Path:
    return Path(blob_dir) / sha[:2] / sha


def put_bytes(blob_dir: str | Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    dest = blob_path(blob_dir, sha)
    if dest.exists():
        return sha
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, dest)
    return sha


def put_text(blob_dir: str | Path, text: str) -> str:
    return put_bytes(blob_dir, text.encode())


def get_bytes(blob_dir: str | Path, sha: str) -> bytes:
    return blob_path(blob_dir, sha).read_bytes()


R = TypeVar("R", bound=StageResult)


def keep_files(blob_dir: str | Path, workdir: str | Path, result: R) -> R:
    """`result` with every file it names (paths under `workdir`) kept as a blob and named in its `blobs`. A name that
    leads out of the work dir, through a link, or to no regular file is not kept; the result's message says so."""
    root, blobs, lost = Path(workdir).resolve(), dict(result.blobs), []
    for name, relpath in result.files.items():
        path = root / relpath
        inside = path.resolve().is_relative_to(root) and not any(p.is_symlink() for p in [path, *path.parents]
                                                                   if p.is_relative_to(root) and p != root)
        if inside and path.is_file():
            blobs[name] = put_bytes(blob_dir, path.read_bytes())
        else:
            lost.append(f"{name} ({relpath}: {'missing' if inside else 'outside the work dir'})")
    message = result.message + (f" [files not kept: {', '.join(lost)}]" if lost else "")
    return result.model_copy(update={"blobs": blobs, "files": {}, "message": message})
