"""The error hierarchy: candidate faults are data (a failure row); infrastructure faults are retried."""

from __future__ import annotations


class KernelflowError(Exception):
    """Base of every error kernelflow raises on purpose."""


class ProblemError(KernelflowError):
    """A problem file is broken; the message names the file and what is wrong."""

    def __init__(self, path: str, what: str):
        self.path, self.what = path, what
        super().__init__(f"problem file {path}: {what}")


class CandidateFault(KernelflowError):
    """The candidate is at fault; becomes a failure row with this kind, never kills the flow."""

    def __init__(self, kind: str, message: str):
        self.kind, self.message = kind, message
        super().__init__(f"{kind}: {message}")


class InfrastructureError(KernelflowError):
    """Something outside the candidate failed (store, worker, toolchain crash); Prefect retries these."""


class StoreUnavailable(InfrastructureError):
    """The remote artifact store (S3) did not answer, or refused, after retries."""

    def __init__(self, url: str, action: str, error: BaseException):
        self.url, self.action, self.error = url, action, error
        super().__init__(f"{action} at {url} failed: {type(error).__name__}: {error}")


class StopSearch(KernelflowError):
    """A stop condition of the optimize loop (budget, wall time, target reached), with its reason."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)
