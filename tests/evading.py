"""Candidate source that runs code beyond a stage's in-process defences, as a candidate that evades them would."""


def evading(code: str) -> str:
    """Source that runs `code` in a child process started through libc's system(), hex-encoded: no static check reads
    it and the audit hook (stages/harness/audit.py) sees no process start made from C. What the child can do is what
    the stage's sandbox (a subprocess's, a container's) alone allows."""
    return ("\nimport ctypes as _c, sys as _s\n_c.CDLL(None).system((_s.executable + ' -c \"exec(bytes.fromhex('"
            f"+ repr('{code.encode().hex()}') + ').decode())\"').encode())\n")
