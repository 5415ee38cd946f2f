"""The subprocess executor's sandbox: what the kernel, not code inside the stage process, stops a candidate from doing.

stages/harness/audit.py watches candidate code from inside its own process; a candidate that reaches the OS through ctypes or
a child process passes it. What holds here holds for such a candidate and for every process it starts:
- environment: the caller's without secret-named variables (stages/executors/run.py's `stage_env`);
- a throwaway HOME and temp dir: a fresh `<stage>.home` and `<stage>.tmp` in the call's work dir (HOME; TMPDIR, TMP,
  TEMP), removed after the call. The compile caches stay warm where they were: Triton's (TRITON_HOME, the real
  home), CUDA's JIT cache (CUDA_CACHE_PATH), torch.compile's (TORCHINDUCTOR_CACHE_DIR), torch extensions
  (TORCH_EXTENSIONS_DIR, under the store), and the user's site-packages (PYTHONUSERBASE);
- file-system writes only beneath the work dir, those caches and /dev (Landlock, stages/executors/landlock.py, where
  the kernel has it): a write anywhere else fails with EACCES, from Python, ctypes or a child process alike;
- limits set in the child before exec and inherited by its children: CPU time (from the request's deadline: past it
  SIGXCPU, a "timeout" verdict), file size, no core dumps, processes and threads; address space on requests that
  run no GPU code (a compile, a CPU request: CUDA reserves far more virtual address space than any useful
  RLIMIT_AS), and on every request the resident memory of the call's processes together, which the executor
  watches from outside (stages/executors/run.py: past it the call ends as "oom"; no cgroup is used);
- no network: a user namespace (our uid and gid mapped to themselves, so files and the 0666 /dev/nvidia* nodes stay
  reachable) and a network namespace with only loopback, up. Whether the kernel lets an unprivileged process do this
  is probed once per process, in a child.
Each call's record (`StageResult.sandbox`) names every feature, "applied: ..." or "not applied: why". Nothing fails
silently: `network_isolation="required"` or `file_isolation="required"` turns a missing kernel feature into an error.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import glob
import json
import math
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field

from kernelflow.stages import caches
from kernelflow.stages.contracts import Contract, StageRequest
from kernelflow.stages.entry import INFRA_EXIT
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors import landlock
from kernelflow.stages.lifetime import die_with_parent

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CLONE_NEWUSER, CLONE_NEWNET = 0x10000000, 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
ENTER_FAILED = "the stage process could not enter its sandbox: "
CPU_GRACE_S = 5  # from SIGXCPU (the soft limit) to SIGKILL (the hard one), for a process that ignores SIGXCPU
# looked up here, not in a forked child (a lookup there takes the loader's lock): os.unshare is Python 3.12+
_unshare = ctypes.CDLL(None, use_errno=True).unshare


class Sandbox(Contract):
    """The subprocess executor and its limits (`mode=Sandbox(...)`; the plain "subprocess" mode is `Sandbox()`)."""

    kind: Literal["subprocess"] = Field(default="subprocess", description="tells this executor from inline/docker")
    cpu_cores: float | None = Field(default=None, description="CPU seconds per second of the request's timeout_s: "
                                    "RLIMIT_CPU = timeout_s x cpu_cores + cpu_margin_s. None: the cores this process may "
                                    "use, so the wall deadline comes first and the limit stops only what outlives it")
    cpu_margin_s: float = Field(default=30.0, description="seconds added to the CPU-time limit")
    file_size_bytes: int = Field(default=4 << 30, description="largest file a stage process may write (RLIMIT_FSIZE); "
                                 "ncu reports and cubins fit in the default")
    processes: int = Field(default=2048, description="processes and threads a stage call may add (RLIMIT_NPROC): "
                           "counted in its own user namespace where it has one, else on top of the tasks our uid runs "
                           "at spawn (the kernel counts per user); nvcc, ptxas and inductor's workers fit")
    memory_bytes: int = Field(default=16 << 30, description="address space per process (RLIMIT_AS), for requests "
                              "that run no GPU code (a compile; device cpu): CUDA reserves more virtual memory than "
                              "any useful limit")
    resident_bytes: int | None = Field(default=None, description="resident memory of a call's processes together, "
                                       "on every request: the executor ends the call past it (oom). None: half of "
                                       "this machine's memory")
    file_isolation: Literal["best_effort", "required", "off"] = Field(
        default="best_effort", description="writes only beneath the work dir, the compile caches and /dev (Landlock): "
        "applied where the kernel has it and recorded either way (best_effort), an InfrastructureError where it has "
        "not (required), or not tried")
    network_isolation: Literal["best_effort", "required", "off"] = Field(
        default="best_effort", description="a network namespace with loopback only: applied where the kernel allows "
        "it and recorded either way (best_effort), an InfrastructureError where it does not (required), or not tried")


@dataclass(frozen=True)
class Probe:
    """What this kernel lets an unprivileged stage process do (probed once per process)."""

    why_not: str | None  # None: a user and network namespace of its own works, with the GPU nodes still reachable
    nproc: Literal["exempt", "namespace", "user"]  # what RLIMIT_NPROC counts (in the namespace, where there is one)
    lifts_limits: bool  # without a namespace, a stage process could raise its own hard limits (CAP_SYS_RESOURCE)


@dataclass(frozen=True)
class Plan:
    """One stage call's sandbox: its environment, what `enter` does in the child, and the record."""

    env: dict[str, str]
    temp_dir: Path
    home: Path
    isolate: bool
    writable: tuple[str, ...] | None  # Landlock: the only places the process may change; None: not applied
    landlock_abi: int
    resident_bytes: int  # of the call's processes together, watched by the executor
    ids: tuple[int, int]  # effective uid and gid, mapped to themselves in the user namespace
    rlimits: tuple[tuple[int, int, int], ...]  # (resource, soft, hard), set after the namespace
    record: dict[str, str]
    parent: int = field(default_factory=os.getpid)  # the process that starts the stage process

    def enter(self) -> None:
        """Popen's preexec_fn, in the forked child before exec: system calls only (no imports, no locks taken).
        The rlimits come last, so that no limit (RLIMIT_AS on the parent's address space) binds this code. A step
        that fails writes why to the child's stderr (the call's log) before Popen reports it without the reason."""
        try:
            if self.isolate:
                isolate_network(*self.ids)
            if self.writable is not None:
                landlock.restrict_writes(self.writable, self.landlock_abi)
            # dies with the process that started it: a flow killed mid-call leaves no stage process timing on,
            # writing into the work dir a resumed run reuses, or holding the GPU outside its lock
            die_with_parent(self.parent, INFRA_EXIT)
            for which, soft, hard in self.rlimits:
                resource.setrlimit(which, (soft, hard))
        except BaseException as e:
            os.write(2, f"{ENTER_FAILED}{type(e).__name__}: {e}\n".encode(errors="replace"))
            raise

    def verdict(self, signum: int) -> tuple[str, str] | None:
        """(failure kind, why) for a stage process killed by one of the sandbox's limits, else None."""
        limits = {which: soft for which, soft, _ in self.rlimits}
        if signum == signal.SIGXCPU and resource.RLIMIT_CPU in limits:
            return "timeout", f"killed at its CPU-time limit (SIGXCPU: RLIMIT_CPU {limits[resource.RLIMIT_CPU]} s)"
        if signum == signal.SIGXFSZ and resource.RLIMIT_FSIZE in limits:
            return "crash", f"killed at its file-size limit (SIGXFSZ: RLIMIT_FSIZE {limits[resource.RLIMIT_FSIZE]} bytes)"
        return None

    def clean(self) -> None:
        shutil.rmtree(self.temp_dir, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)


def plan(sandbox: Sandbox, stage: str, request: StageRequest, env: dict[str, str], withheld: list[str]) -> Plan:
    """The sandbox of one call of `stage` on `request`, whose process gets `env` (`withheld`: the secret-named
    variables left out of it). Creates the call's temp dir and home; raises InfrastructureError when the network or
    the file system must be isolated and cannot be."""
    work = Path(request.workdir).resolve()
    temp, home = work / f"{stage}.tmp", work / f"{stage}.home"
    for fresh in (temp, home):
        shutil.rmtree(fresh, ignore_errors=True)
        fresh.mkdir(mode=0o700, parents=True)
    env = env | dict.fromkeys(("TMPDIR", "TMP", "TEMP"), str(temp)) | caches.named(env) | {"HOME": str(home)}
    record = {"environment": "applied: " + (f"withheld {', '.join(sorted(withheld))}" if withheld else
                                            "no secret-named variable was set"),
              "temp_dir": f"applied: {temp} (TMPDIR, TMP, TEMP; removed after the call)",
              "home": f"applied: HOME={home} (removed after the call); the compile caches stay where they were "
                      "(TRITON_HOME, CUDA_CACHE_PATH, TORCHINDUCTOR_CACHE_DIR, TORCH_EXTENSIONS_DIR, PYTHONUSERBASE)"}
    isolate, network = _network(sandbox)
    record["network"] = network
    writable, files = _files(sandbox, work, env, getattr(request, "device", None))
    record["files"] = files
    rlimits, notes = _limits(sandbox, request, isolate)
    resident = sandbox.resident_bytes or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
    notes["resident_memory"] = f"applied: {resident} bytes for the call's processes together, watched by the executor"
    return Plan(env, temp, home, isolate, writable, landlock.abi(), resident, (os.geteuid(), os.getegid()), rlimits,
                record | notes)


def _files(sandbox: Sandbox, work: Path, env: dict[str, str], device: str | None) -> tuple[tuple[str, ...] | None, str]:
    """(the places a stage process may change, or None; the record's words). A request on the GPU may also write
    beneath /proc: the CUDA driver does when it starts, and fails with error 304 where it cannot."""
    if sandbox.file_isolation == "off":
        return None, "not applied: switched off (file_isolation='off')"
    if (version := landlock.abi()) == 0:
        why = "this kernel has no Landlock (Linux >= 5.13 with landlock among its security modules)"
        if sandbox.file_isolation == "required":
            raise InfrastructureError(f"the sandbox must confine writes (file_isolation='required') and cannot here: "
                                      f"{why}")
        return None, f"not applied: {why}; writes outside the work dir are only detected (stages/harness/audit.py)"
    places = [str(work), "/dev", *caches.writable(env)] + (["/proc"] if device == "cuda" else [])
    for place in places[2:]:
        with contextlib.suppress(OSError):  # a cache that cannot be made here is not writable there either
            os.makedirs(place, exist_ok=True)
    return tuple(places), f"applied: Landlock ABI {version}, writes only beneath {', '.join(places)}"


def _network(sandbox: Sandbox) -> tuple[bool, str]:
    if sandbox.network_isolation == "off":
        return False, "not applied: switched off (network_isolation='off')"
    why_not = probe().why_not
    if why_not is None:
        return True, "applied: own user and network namespace, loopback only"
    if sandbox.network_isolation == "required":
        raise InfrastructureError(f"the sandbox must isolate the network (network_isolation='required') and cannot "
                                  f"here: {why_not}")
    return False, f"not applied: {why_not}"


def _limits(sandbox: Sandbox, request: StageRequest, isolate: bool) -> tuple[tuple[tuple[int, int, int], ...],
                                                                             dict[str, str]]:
    """The rlimits of this call, (resource, soft, hard), and the record's words for them."""
    rlimits: list[tuple[int, int, int]] = []

    def limit(which: int, soft: int, hard: int) -> int:
        """Never above what this process has: only a privileged process may raise a hard limit."""
        have_soft, have_hard = (math.inf if v == resource.RLIM_INFINITY else v for v in resource.getrlimit(which))
        hard = int(min(hard, have_hard))
        rlimits.append((which, int(min(soft, have_soft, hard)), hard))
        return rlimits[-1][1]

    device = getattr(request, "device", None)
    cores = sandbox.cpu_cores if sandbox.cpu_cores is not None else len(os.sched_getaffinity(0))
    cpu_s = math.ceil(request.timeout_s * cores + sandbox.cpu_margin_s)
    notes = {"cpu_time": f"applied: RLIMIT_CPU {limit(resource.RLIMIT_CPU, cpu_s, cpu_s + CPU_GRACE_S)} s per "
                         f"process (timeout {request.timeout_s:g} s x {cores:g} cores + {sandbox.cpu_margin_s:g} s)",
             "file_size": f"applied: RLIMIT_FSIZE {limit(resource.RLIMIT_FSIZE, *[sandbox.file_size_bytes] * 2)} bytes",
             "core_dumps": f"applied: RLIMIT_CORE {limit(resource.RLIMIT_CORE, 0, 0)}"}
    if probe().nproc == "exempt":
        notes["processes"] = "not applied: RLIMIT_NPROC does not bind this uid (the kernel exempts root's tasks)"
    elif isolate and probe().nproc == "namespace":
        notes["processes"] = (f"applied: RLIMIT_NPROC {limit(resource.RLIMIT_NPROC, *[sandbox.processes] * 2)}, "
                              "counted in the call's own user namespace")
    else:
        tasks = _user_tasks(os.getuid())
        notes["processes"] = (f"applied: RLIMIT_NPROC {limit(resource.RLIMIT_NPROC, *[tasks + sandbox.processes] * 2)}"
                              f", counted per user: the {tasks} tasks of uid {os.getuid()} seen at spawn + "
                              f"{sandbox.processes}")
    if device in ("cpu", None):  # a request without a device (a compile) runs no GPU code
        notes["memory"] = f"applied: RLIMIT_AS {limit(resource.RLIMIT_AS, *[sandbox.memory_bytes] * 2)} bytes per process"
    else:
        notes["memory"] = (f"not applied: the request's device is {device or 'not named'} (CUDA reserves more address "
                           "space than RLIMIT_AS can allow; no cgroup is used)")
    if probe().lifts_limits and not isolate:  # CAP_SYS_RESOURCE, which only a user namespace of its own takes away
        notes = {k: f"{v}; the stage process may lift it (CAP_SYS_RESOURCE)" if v.startswith("applied: RLIMIT") else v
                 for k, v in notes.items()}
    return tuple(rlimits), notes


def _user_tasks(uid: int) -> int:
    """Processes and threads whose real uid is `uid`, as far as this process sees (RLIMIT_NPROC counts these)."""
    count = 0
    for status in glob.glob("/proc/[0-9]*/status"):
        try:
            fields = dict(line.split(":", 1) for line in Path(status).read_text().splitlines() if ":" in line)
        except OSError:
            continue  # it ended meanwhile
        if int(fields["Uid"].split()[0]) == uid:
            count += int(fields["Threads"])
    return count


def descendants(pid: int) -> set[int]:
    """Every process below `pid`, from /proc (stage processes in sessions of their own included): what a test of a
    killed flow, or a load run's memory meter, looks for."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            children.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def isolate_network(uid: int, gid: int) -> None:
    """Enter a new user namespace (uid and gid mapped to themselves) and a new network namespace with loopback up.
    The caller must be single-threaded (a forked child is). Raises OSError naming the step that failed."""
    step = "unshare(CLONE_NEWUSER|CLONE_NEWNET)"
    try:
        if _unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        for step, text in (("/proc/self/setgroups", "deny"), ("/proc/self/uid_map", f"{uid} {uid} 1"),
                           ("/proc/self/gid_map", f"{gid} {gid} 1")):
            fd = os.open(step, os.O_WRONLY)
            try:
                os.write(fd, text.encode())
            finally:
                os.close(fd)
        step = "bringing loopback up"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            flags = struct.unpack("16sH", fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sH22x", b"lo", 0))[:18])[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | IFF_UP))
    except OSError as e:
        raise OSError(e.errno, f"{step}: {e.strerror}") from None


@cache
def probe() -> Probe:
    """What the kernel lets a stage process do, tried once per process in a child (`python -m kernelflow.stages.executors.sandbox`): some
    kernels, seccomp profiles and containers forbid unprivileged user namespaces; root may or may not be exempt."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run([sys.executable, "-m", "kernelflow.stages.executors.sandbox"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return Probe("the namespace probe did not answer in 60 s", "user", False)
    try:
        return Probe(**json.loads(done.stdout.strip().splitlines()[-1]))
    except (IndexError, ValueError, TypeError):
        return Probe(f"the namespace probe failed (exit status {done.returncode}: {done.stderr[-500:].strip()})",
                     "user", False)


def _probe_here() -> dict[str, object]:
    """The probe's child: try the namespaces and check what a stage process needs inside them, then how limits
    behave (there, or here when there is no namespace)."""
    uid, gid = os.geteuid(), os.getegid()
    devices = [d for d in sorted(glob.glob("/dev/nvidia*")) if os.access(d, os.R_OK | os.W_OK)]
    lifts = _lifts_limits()
    try:
        isolate_network(uid, gid)
    except OSError as e:
        return {"why_not": e.strerror, "nproc": _nproc_counting(), "lifts_limits": lifts}
    interfaces = sorted(name for _, name in socket.if_nameindex())
    lost = [d for d in devices if not os.access(d, os.R_OK | os.W_OK)]
    why_not = (f"the namespace changed our ids to {os.geteuid()}:{os.getegid()}" if (os.geteuid(), os.getegid()) != (uid, gid)
               else f"the new network namespace has interfaces {interfaces}" if interfaces != ["lo"]
               else f"{', '.join(lost)} not reachable inside a user namespace" if lost else None)
    return {"why_not": why_not, "nproc": _nproc_counting(), "lifts_limits": lifts}


def _lifts_limits() -> bool:
    """Whether this process may raise a hard limit it lowered (CAP_SYS_RESOURCE in the initial user namespace)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the probe's own process: nothing to give back
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 1))
        return True
    except (ValueError, OSError):
        return False


def _nproc_counting() -> str:
    """How RLIMIT_NPROC binds here: "exempt" (root's tasks: another one starts under a limit of 1), "namespace"
    (only this user namespace's tasks count, Linux >= 5.14: one more starts under a limit of 2) or "user" (every
    task of our uid counts)."""
    def forks(limit: int) -> bool:
        resource.setrlimit(resource.RLIMIT_NPROC, (limit, resource.getrlimit(resource.RLIMIT_NPROC)[1]))
        try:
            if (pid := os.fork()) == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            return True
        except OSError:
            return False

    two = forks(2)
    return "exempt" if forks(1) else "namespace" if two else "user"


if __name__ == "__main__":
    print(json.dumps(_probe_here()))
