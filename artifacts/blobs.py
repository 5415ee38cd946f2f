"""Content-addressed blobs in a local directory: blobs/ab/abcdef... (sha256 of the bytes). Writes are atomic."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


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
