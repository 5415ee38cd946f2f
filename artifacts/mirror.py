"""A local working copy mirrored to a remote store (artifacts/s3.py), with a spool of the uploads not done yet.

Everything is written locally first, as without a remote (stages keep writing blobs into the local blob dir, work
dirs stay local); then each new file is named in the spool, `<local>/spool/`, one small file per pending upload,
before the upload is tried, so a crash or an unreachable remote loses nothing. The spool drains oldest first
(a row's blobs go up before the table part that names them), on every store write, at the end of a run, and on
`flush()`. A failed upload warns (MirrorWarning); for COOLDOWN_S after it, writes only spool, so an unreachable
remote does not slow a run down. Blobs are content-addressed: one already on the remote is never uploaded again. Reads fetch the table parts and
blobs the local copy lacks; parts are immutable, so a part's name is its content.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import tempfile
import threading
import time
import warnings
from pathlib import Path

from kernelflow.artifacts.s3 import S3Remote
from kernelflow.stages.errors import StoreUnavailable


class MirrorWarning(UserWarning):
    """The local copy and the remote store disagree for now: uploads wait in the spool, or a read saw the local copy
    only."""


class Mirror:
    COOLDOWN_S = 60.0  # after a failed upload, writes spool without trying the remote for this long

    def __init__(self, root: Path, remote: S3Remote):
        self.root, self.remote = root, remote
        self.spool = root / "spool"
        self.spool.mkdir(parents=True, exist_ok=True)
        self._on_remote: set[str] = set()  # blobs known to be there
        self._down_until = 0.0
        self._lock = threading.Lock()
        self._seq = itertools.count()

    def pending(self) -> list[str]:
        """What waits to go up, oldest first (relative paths)."""
        return [key for _, key in self._entries()]

    def push(self, rels: list[str]) -> None:
        """Spool these new files of the local copy, then drain the spool unless the remote is cooling down."""
        for rel in rels:
            if rel not in self._on_remote:
                name = f"{time.time_ns():020d}-{next(self._seq):06d}-{hashlib.sha1(rel.encode()).hexdigest()[:12]}"
                fd, tmp = tempfile.mkstemp(dir=self.spool, prefix=".tmp-")
                with os.fdopen(fd, "w") as f:
                    f.write(rel)
                os.replace(tmp, self.spool / name)
        if time.monotonic() >= self._down_until:
            self.flush()

    def flush(self) -> int:
        """Upload everything the spool holds, oldest first; the number still pending (0: all up). Warns on failure."""
        with self._lock:
            for entry, rel in self._entries():
                try:
                    self._upload(rel)
                except StoreUnavailable as e:
                    self._down_until = time.monotonic() + self.COOLDOWN_S
                    left = len(self._entries())
                    warnings.warn(MirrorWarning(
                        f"{left} artifact file(s) not uploaded to {self.remote.url} ({e.error}); they wait in "
                        f"{self.spool} and go up with a later write, at the end of the run, or with "
                        f"`kernelflow flush --store {self.remote.url}`"), stacklevel=3)
                    return left
                entry.unlink(missing_ok=True)
            self._down_until = 0.0
            return 0

    def _entries(self) -> list[tuple[Path, str]]:
        out = []
        for entry in sorted(self.spool.glob("[0-9]*")):
            try:
                out.append((entry, entry.read_text()))
            except FileNotFoundError:  # another process drained it
                continue
        return out

    def _upload(self, rel: str) -> None:
        path = self.root / rel
        if not path.exists():
            warnings.warn(MirrorWarning(f"{path} was spooled for {self.remote.url} but is gone from the local copy; "
                                        "dropped from the spool"), stacklevel=4)
            return
        blob = rel.startswith("blobs/")
        if blob and (rel in self._on_remote or self.remote.exists(rel)):
            self._on_remote.add(rel)
            return
        self.remote.upload(path, rel)
        if blob:
            self._on_remote.add(rel)

    def fetch_parts(self, rel_dir: str) -> None:
        """Download the table parts under rel_dir that the local copy lacks; with the remote down, warn and keep
        to the local copy."""
        if time.monotonic() < self._down_until:
            return
        try:
            for rel in self.remote.list(rel_dir + "/"):
                if Path(rel).name.startswith("part-") and rel.endswith(".parquet") and not (self.root / rel).exists():
                    self.remote.download(rel, self.root / rel)
        except StoreUnavailable as e:
            self._down_until = time.monotonic() + self.COOLDOWN_S
            warnings.warn(MirrorWarning(f"could not read {self.remote.url}/{rel_dir} ({e.error}); reading the local "
                                        f"copy {self.root} only"), stacklevel=3)

    def fetch(self, rel: str) -> bool:
        """Download one file into the local copy; False when the remote lacks it. Raises StoreUnavailable."""
        return self.remote.download(rel, self.root / rel)
