"""The S3 fixtures: moto's S3-compatible server on a free localhost port, a proxy in front of it that injects faults,
and a fresh bucket reached through the proxy with test keys only (tests/artifacts/test_s3_store.py, tests/flows/test_faults.py).
moto and boto3 are imported by the fixtures, not by this module, so that a machine without them (the GPU worker,
whose wheelhouse leaves them out) still collects the files that use it, and runs their other tests. There the S3
tests skip with the reason; under CI=true they fail, since make test installs both."""

from __future__ import annotations

import contextlib
import importlib
import os
import uuid
from types import ModuleType

import pytest
from faulty_proxy import FaultyProxy

from kernelflow.artifacts.blobs import put_bytes
from kernelflow.artifacts.store import Store
from kernelflow.stages.contracts import Candidate, Origin, VerifyResult


def need(module: str) -> ModuleType:
    """`module` imported; else a skip naming it, or under CI=true the ImportError."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"{module} is not installed here (make test installs it)")


AWS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def moto_url():
    server = need("moto.server").ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def proxy(moto_url):
    proxy = FaultyProxy(moto_url)
    yield proxy
    with contextlib.suppress(AssertionError, OSError):
        proxy.stop()


@pytest.fixture
def s3(moto_url, proxy, tmp_path, monkeypatch):
    """A fresh bucket; boto3 (ours and the store's) reaches it through the proxy, with test keys only."""
    for key, value in AWS.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3", "KERNELFLOW_STORE",
                "KERNELFLOW_STORE_LOCAL"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
    monkeypatch.setattr(need("kernelflow.artifacts.s3").S3Remote, "BACKOFF_S", 0.01)
    bucket = f"kf-{uuid.uuid4().hex[:12]}"
    client = need("boto3").client("s3", endpoint_url=moto_url)  # straight to the server: what is really there
    client.create_bucket(Bucket=bucket)
    return bucket, client


def keys(client, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


def candidate(n: int) -> Candidate:
    return Candidate.make("p", "triton", f"source {n}", Origin(kind="user", proposer="test"))


def checked(store: Store, cand: Candidate, log: bytes) -> VerifyResult:
    """A verification row naming a log blob written into the store's local blob dir, as a stage process does."""
    return VerifyResult(candidate_id=cand.id, problem_id="p", status="ok", device="cpu", sizes=["cpu"],
                        blobs={"verify_log": put_bytes(store.blob_dir, log)})
