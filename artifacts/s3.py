"""S3, or any S3-compatible server, as the remote copy of an artifact store: one bucket and key prefix, keys laid out
like the local store's relative paths (`<prefix>/blobs/ab/abcdef…`, `<prefix>/tables/<table>/run_id=<run>/part-…`).

The endpoint and the credentials are boto3's own: `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`) for MinIO and other
S3-compatible servers, else AWS; keys from the environment, a profile or an instance role. Files above
MULTIPART_THRESHOLD_BYTES go up in parts. Transient faults (connection refused or reset, timeouts, 5xx, throttling)
are retried here with exponential backoff and jitter, and only here: botocore's own retries are off, so one policy
decides. What still fails raises StoreUnavailable.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import boto3
from boto3.exceptions import RetriesExceededError, S3UploadFailedError
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as EndpointDown
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential, wait_random

from kernelflow.stages.errors import StoreUnavailable

T = TypeVar("T")
THROTTLED = {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "RequestLimitExceeded",
             "InternalError", "ServiceUnavailable"}
MISSING = {"404", "NoSuchKey", "NotFound"}


def split_url(url: str) -> tuple[str, str]:
    """s3://bucket/some/prefix -> ("bucket", "some/prefix")."""
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not url.startswith("s3://") or not bucket:
        raise ValueError(f"{url!r} is not an S3 store URL (s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def _cause(error: BaseException) -> BaseException:
    """boto3's upload_file wraps the client error it met in S3UploadFailedError (as the context)."""
    return error.__context__ if isinstance(error, S3UploadFailedError) and error.__context__ else error


def transient(error: BaseException) -> bool:
    """Worth another try: the server was unreachable, timed out, failed (5xx) or asked us to slow down."""
    error = _cause(error)
    if isinstance(error, EndpointDown | HTTPClientError | RetriesExceededError):
        return True
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or error.response.get("Error", {}).get("Code") in THROTTLED
    return False


def _missing(error: BaseException) -> bool:
    error = _cause(error)
    return isinstance(error, ClientError) and error.response.get("Error", {}).get("Code") in MISSING


class S3Remote:
    """Upload, download, test and list the files of one store prefix; each call retried on transient faults."""

    ATTEMPTS = 5  # tries per call; the waits between them grow 0.5, 1, 2, 4 s (plus jitter)
    BACKOFF_S = 0.5
    MULTIPART_THRESHOLD_BYTES = 64 * 2**20
    CHUNK_BYTES = 16 * 2**20  # part size of a multipart upload (S3's minimum is 5 MiB)

    def __init__(self, url: str):
        self.bucket, self.prefix = split_url(url)
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.client = boto3.session.Session().client("s3", config=Config(
            retries={"total_max_attempts": 1}, connect_timeout=10, read_timeout=120))
        self.transfer = TransferConfig(multipart_threshold=self.MULTIPART_THRESHOLD_BYTES,
                                       multipart_chunksize=self.CHUNK_BYTES)

    def key(self, rel: str) -> str:
        return f"{self.prefix}/{rel}" if self.prefix else rel

    def _call(self, action: str, rel: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        retrying = Retrying(retry=retry_if_exception(transient), stop=stop_after_attempt(self.ATTEMPTS),
                            wait=wait_exponential(multiplier=self.BACKOFF_S, max=30) + wait_random(0, self.BACKOFF_S),
                            reraise=True)
        try:
            return retrying(fn, *args, **kwargs)
        except (BotoCoreError, ClientError, S3UploadFailedError, RetriesExceededError) as e:
            if _missing(e):
                raise FileNotFoundError(f"{self.url}/{rel} does not exist") from e
            raise StoreUnavailable(self.url, f"{action} {rel}", _cause(e)) from e

    def probe(self) -> None:
        """Raise StoreUnavailable unless the endpoint answers and lets us list the store's prefix (one key at most)."""
        self._call("list", "", self.client.list_objects_v2, Bucket=self.bucket, Prefix=self.key(""), MaxKeys=1)

    def exists(self, rel: str) -> bool:
        try:
            self._call("HEAD", rel, self.client.head_object, Bucket=self.bucket, Key=self.key(rel))
        except FileNotFoundError:
            return False
        return True

    def upload(self, path: Path, rel: str) -> None:
        self._call("upload", rel, self.client.upload_file, str(path), self.bucket, self.key(rel), Config=self.transfer)

    def download(self, rel: str, dest: Path) -> bool:
        """Fetch a file into dest (atomically: a temporary name, then renamed); False when the remote lacks it."""
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        os.close(fd)
        try:
            self._call("download", rel, self.client.download_file, self.bucket, self.key(rel), tmp,
                       Config=self.transfer)
            os.replace(tmp, dest)
        except FileNotFoundError:
            return False
        finally:
            Path(tmp).unlink(missing_ok=True)
        return True

    def list(self, rel_prefix: str) -> list[str]:
        """Relative keys of every file under rel_prefix."""
        def keys() -> list[str]:
            pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                          Prefix=self.key(rel_prefix))
            return [o["Key"] for page in pages for o in page.get("Contents", [])]

        cut = len(self.prefix) + 1 if self.prefix else 0
        return [k[cut:] for k in self._call("list", rel_prefix, keys)]
