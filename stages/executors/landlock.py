"""Landlock (Linux >= 5.13, no privilege needed): a process gives up the right to change the file system anywhere
but beneath the directories it names, for itself and every process it starts, for good.

Only the rights that change the file system are handled (writing a file, truncating it, making or removing files,
directories, links, devices, sockets and fifos, moving a file between directories): reading, executing and ioctl
stay as they were, so a stage process still imports its libraries, runs its compilers and talks to the GPU. The
kernel, not code in the process, refuses the rest with EACCES, whether the attempt comes from Python, ctypes or a
child process.

`restrict_writes` runs in a forked child before exec (Popen's preexec_fn): system calls only, through libc functions
looked up here in the parent.
"""

from __future__ import annotations

import ctypes
import os
import struct
from functools import cache

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # the same numbers on every architecture
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
PR_SET_NO_NEW_PRIVS = 38
WRITE_FILE, REMOVE_DIR, REMOVE_FILE, MAKE_CHAR, MAKE_DIR, MAKE_REG, MAKE_SOCK, MAKE_FIFO, MAKE_BLOCK, MAKE_SYM = (
    1 << 1, 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11, 1 << 12)
REFER, TRUNCATE = 1 << 13, 1 << 14  # ABI 2, ABI 3
FILE_RIGHTS = WRITE_FILE | TRUNCATE  # what a rule on a single file (a device node) may grant
# looked up here, in the parent: a lookup in the forked child would take the dynamic loader's lock
_libc = ctypes.CDLL(None, use_errno=True)
_syscall, _prctl = _libc.syscall, _libc.prctl


@cache
def abi() -> int:
    """The Landlock ABI version this kernel offers; 0 where it has none (too old, or not among its security modules)."""
    version = _syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return max(version, 0)


def handled(version: int) -> int:
    """The write rights a ruleset of ABI `version` handles."""
    rights = WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK | MAKE_FIFO | \
        MAKE_BLOCK | MAKE_SYM
    return rights | (REFER if version >= 2 else 0) | (TRUNCATE if version >= 3 else 0)


def _fail(step: str) -> None:
    err = ctypes.get_errno()
    raise OSError(err, f"{step}: {os.strerror(err)}")


def restrict_writes(writable: tuple[str, ...], version: int) -> None:
    """From now on this process and its children may change the file system only beneath `writable` (directories,
    or single files such as device nodes, which get FILE_RIGHTS); a path that does not exist is skipped. `version`:
    abi(), asked in the parent. Raises OSError naming the step that failed."""
    rights = handled(version)
    ruleset = _syscall(SYS_CREATE_RULESET, struct.pack("Q", rights), ctypes.c_size_t(8), ctypes.c_uint32(0))
    if ruleset < 0:
        _fail("landlock_create_ruleset")
    try:
        for path in writable:
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                grant = rights if os.path.isdir(path) else rights & FILE_RIGHTS
                rule = struct.pack("=Qi", grant, fd)  # struct landlock_path_beneath_attr (packed)
                if _syscall(SYS_ADD_RULE, ruleset, RULE_PATH_BENEATH, rule, ctypes.c_uint32(0)) != 0:
                    _fail(f"landlock_add_rule {path}")
            finally:
                os.close(fd)
        if _prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            _fail("prctl(PR_SET_NO_NEW_PRIVS)")
        if _syscall(SYS_RESTRICT_SELF, ruleset, ctypes.c_uint32(0)) != 0:
            _fail("landlock_restrict_self")
    finally:
        os.close(ruleset)
