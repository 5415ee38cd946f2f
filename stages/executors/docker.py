"""The docker executor: each stage call in a container of its own, through the docker SDK.

The container runs `python -m stages.<name> REQUEST.json RESULT.json` of the image's installed kernelflow, as the
image's non-root user (or, when kernelflow itself is not root, as the caller's uid), with:
- no network (network_mode none), a read-only root, every capability dropped, no-new-privileges;
- writable only: the call's work directory (mounted at its own path: what the call makes is left there, named in
  its result) and /tmp (tmpfs: HOME, Triton's cache, torch extensions);
- the problem file as the request carries it (read-only), so the container needs nothing of the host's paths;
- a memory and a process limit, the request's deadline (past it the container is killed: a "timeout" result);
- an environment built from nothing (never the caller's: no key or token can reach candidate code);
- the GPUs (a device request) only when the request's device is cuda: compile never sees one.
The container is removed whatever happens, a SIGKILL of the caller included: each names its owner in a label,
and a guard process removes an owner's containers when it ends (stages/executors/owner_guard.py). The image
must carry the same stage code as the caller (the fingerprint label that `make images` writes); an old image is an
infrastructure error, not a silent mismatch.
"""

from __future__ import annotations

import hashlib
import os
import signal
import tempfile
import time
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from kernelflow.stages.contracts import Contract, StageRequest
from kernelflow.stages.errors import InfrastructureError
from kernelflow.stages.executors.marks import OWNER_LABEL, owner
from kernelflow.stages.executors.owner_guard import ensure_guard

FINGERPRINT_LABEL = "org.kernelflow.code-fingerprint"
# What a stage process imports of ours (a test checks the list): the image must carry these files as they are here.
FINGERPRINTED = ("__init__.py", "stages")  # under kernelflow/
PROBLEM_DIR = "/kernelflow/problem"  # where the container finds the problem file, read-only
PASSED_ENV = ("KERNELFLOW_CODE_VERSION",)  # the only variables of the caller's that a container gets


class Docker(Contract):
    """The docker executor and its limits (`--executor docker --image NAME`)."""

    kind: Literal["docker"] = Field(default="docker", description="tells this executor from inline/subprocess")
    image: str = Field(description="worker image built from containers/Dockerfile, e.g. kernelflow-cpu")
    mem_limit: str = Field(default="16g", description="container memory limit, docker notation (512m, 16g); "
                           "/tmp's contents count against it")
    pids_limit: int = Field(default=4096, description="most processes and threads in the container")
    tmp_size: str = Field(default="4g", description="size of the tmpfs at /tmp")


def code_fingerprint(root: Path | None = None) -> str:
    """sha256 over the stage code (FINGERPRINTED): what an image must carry to run our stages as we would."""
    root = root or Path(__file__).parents[2]  # the kernelflow package: stages/ is its subpackage, installed or not
    digest = hashlib.sha256()
    for entry in FINGERPRINTED:
        for path in sorted((root / entry).rglob("*.py")) if (root / entry).is_dir() else [root / entry]:
            digest.update(f"{path.relative_to(root).as_posix()}\n".encode() + path.read_bytes() + b"\n")
    return digest.hexdigest()


@cache
def _own_fingerprint() -> str:
    return code_fingerprint()


def _client() -> Any:
    """A client per call: stage calls run in threads side by side (parallel compiles), and a client is not shared.
    The first also starts this process's guard, told that this process creates containers."""
    import docker

    try:
        client = docker.from_env()
    except docker.errors.DockerException as e:
        raise InfrastructureError(f"the docker executor found no Docker engine (DOCKER_HOST or "
                                  f"/var/run/docker.sock): {e}") from e
    ensure_guard(containers=True)
    return client


def _image_user(client: Any, name: str) -> str:
    """The image's user after checking the image: present, not root, carrying our stage code."""
    import docker

    try:
        config = client.images.get(name).attrs["Config"]
    except docker.errors.ImageNotFound as e:
        raise InfrastructureError(f"no image {name!r} on the Docker engine: build it with `make images` "
                                  "(containers/README.md)") from e
    user = config.get("User") or ""
    if user.split(":")[0] in ("", "0", "root"):
        raise InfrastructureError(f"image {name!r} runs as root; stage containers run as a non-root user: build it "
                                  "from containers/Dockerfile")
    found = (config.get("Labels") or {}).get(FINGERPRINT_LABEL)
    if found != _own_fingerprint():
        raise InfrastructureError(f"image {name!r} carries other stage code than this checkout (fingerprint "
                                  f"{found} vs {_own_fingerprint()}): rebuild it with `make images`")
    return user


def _user_and_owner(image_user: str) -> tuple[str, tuple[int, int] | None]:
    """Who runs in the container, and who must own its writable mounts: the image's user when we are root (it
    then gets the call's directories), else our own uid (not root either, and the owner of what we create)."""
    if os.getuid() != 0:
        return f"{os.getuid()}:{os.getgid()}", None
    uid, _, gid = image_user.partition(":")
    if not uid.isdigit() or not (gid or uid).isdigit():
        raise InfrastructureError(f"the image's user {image_user!r} is not numeric uid:gid: build it from "
                                  "containers/Dockerfile")
    return image_user, (int(uid), int(gid or uid))


def _chown_tree(path: Path, owner: tuple[int, int]) -> None:
    os.chown(path, *owner)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), *owner)


def _env(request: StageRequest) -> dict[str, str]:
    env = {"PYTHONFAULTHANDLER": "1", "HOME": "/tmp", "TORCH_EXTENSIONS_DIR": "/tmp/torch_extensions"}
    if getattr(request, "device", None) != "cuda":
        env["TRITON_INTERPRET"] = "1"  # Triton candidates run on CPU tensors through the interpreter
    return env | {k: os.environ[k] for k in PASSED_ENV if k in os.environ}


def _gpus() -> Any:
    """All GPUs, or those the caller may use (CUDA_VISIBLE_DEVICES); inside, they count from 0 again."""
    import docker

    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [d.strip() for d in visible.split(",") if d.strip()] if visible is not None else None
    return docker.types.DeviceRequest(count=None if ids else -1, device_ids=ids, capabilities=[["gpu"]])


def _describe(status: int, oom: bool, docker: Docker) -> tuple[str, str]:
    if oom:
        return "oom", f"killed at the container's memory limit ({docker.mem_limit})"
    if status > 128 and status - 128 in signal.valid_signals():
        return "crash", f"killed by signal {signal.Signals(status - 128).name} (exit status {status})"
    return "crash", f"exited with status {status} without writing a result"


def run_in_container(module: str, request: StageRequest, docker: Docker, req_path: Path, res_path: Path,
                     log_path: Path) -> tuple[int | None, str, str]:
    """Run `python -m MODULE` on the request in a fresh container; the log lands at log_path, the result (if any) at
    res_path. Returns (exit status or None when killed at the deadline, kind, why): "timeout", "oom" or "crash" (the
    last also for a clean exit: the caller reads the result file)."""
    import docker as sdk
    import requests

    # bind mounts take absolute paths, and the container sees each directory at the path the request names
    req_path, res_path = req_path.resolve(), res_path.resolve()
    request = request.model_copy(update={"workdir": str(req_path.parent), "cache_dir": None})
    client = _client()
    try:
        user, owner = _user_and_owner(_image_user(client, docker.image))
        with tempfile.TemporaryDirectory(prefix="kernelflow-call-") as call:
            mounts = _stage(Path(call), request, req_path, owner)
            command = ["python", "-m", module, str(req_path), str(res_path)]
            status, oom = _run(client, command, request, docker, user, mounts, log_path)
    except (sdk.errors.DockerException, requests.exceptions.RequestException) as e:
        raise InfrastructureError(f"docker executor ({docker.image}): {type(e).__name__}: {e}") from e
    finally:
        client.close()
    if status is None:
        return None, "timeout", f"killed after the {request.timeout_s:.0f} s deadline"
    return (status, *_describe(status, oom, docker))


def _stage(call: Path, request: StageRequest, req_path: Path, owner: tuple[int, int] | None) -> list:
    """The call's mounts: its work directory (the request, as the container sees it, written there) and the
    problem's text read-only."""
    from docker.types import Mount

    problem_dir = call / "problem"
    problem_dir.mkdir()
    inner = request
    if (problem := getattr(request, "problem", None)) is not None:
        name = Path(problem.path).name
        (problem_dir / name).write_text(problem.source)
        inner = request.model_copy(update={"problem": problem.model_copy(update={"path": f"{PROBLEM_DIR}/{name}"})})
    req_path.write_text(inner.model_dump_json())
    if owner:
        _chown_tree(req_path.parent, owner)
    return [Mount(str(req_path.parent), str(req_path.parent), type="bind"),
            Mount(PROBLEM_DIR, str(problem_dir), type="bind", read_only=True)]


def _run(client: Any, command: list[str], request: StageRequest, docker: Docker, user: str, mounts: list,
         log_path: Path) -> tuple[int | None, bool]:
    """Create, start, wait (killed at the deadline), keep the log, remove: (exit status or None, OOM-killed)."""
    import docker as sdk
    import requests

    container = None
    try:
        container = client.containers.create(
            docker.image, command, user=user, working_dir=str(log_path.parent), environment=_env(request),
            network_mode="none", read_only=True, mounts=mounts, init=True,
            tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={docker.tmp_size},mode=1777"}, mem_limit=docker.mem_limit,
            memswap_limit=docker.mem_limit, pids_limit=docker.pids_limit, cap_drop=["ALL"],
            security_opt=["no-new-privileges"], labels={"org.kernelflow.stage": command[2], OWNER_LABEL: owner()},
            log_config=sdk.types.LogConfig(type="json-file", config={"max-size": "20m"}),
            device_requests=[_gpus()] if getattr(request, "device", None) == "cuda" else None)
        container.start()
        deadline = time.monotonic() + request.timeout_s
        try:
            status: int | None = container.wait(timeout=request.timeout_s)["StatusCode"]
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            if time.monotonic() < deadline - 1:  # the engine went away, not the deadline
                raise
            try:
                container.kill()
                container.wait(timeout=60)
            except sdk.errors.APIError:  # it ended by itself at the deadline: a timeout all the same
                pass
            status = None
        log_path.write_bytes(container.logs(stdout=True, stderr=True))
        container.reload()
        return status, status is not None and container.attrs["State"]["OOMKilled"]
    finally:
        if container is not None:
            _remove(container)


def _remove(container: Any) -> None:
    import docker as sdk

    try:
        container.remove(force=True)
    except sdk.errors.NotFound:
        pass
    except sdk.errors.DockerException as e:
        print(f"warning: could not remove stage container {container.id[:12]}: {e}", flush=True)

