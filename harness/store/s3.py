"""The object store on any S3-compatible endpoint (AWS S3, MinIO, Ceph RGW, GCS interop), on boto3.

Same contract and key layout as :class:`~harness.store.base.LocalStore`: the object of key ``k``
is ``s3://<bucket>/<prefix>/k``. Credentials come only from boto3's standard chain (environment,
shared config/credentials profile, container or instance role, web identity / service-account
token); nothing here takes, stores or prints a secret. Each request is retried by botocore's
``standard`` retry mode (``max_attempts`` in all; exponential backoff with jitter on 5xx,
throttling and connection errors). Puts and gets go through boto3's managed transfers
(``upload_fileobj``/``download_fileobj`` with a :class:`~boto3.s3.transfer.TransferConfig`), so
objects from ``multipart_threshold_mb`` on move in parallel parts. A conditional put is one
``PutObject`` with ``If-None-Match: *`` (S3's limit for one PUT: 5 GiB). See docs/storage.md.
"""

from __future__ import annotations

import errno
import io
from collections.abc import Iterator

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from harness.store.base import InvalidKey, StoreError, check_key

MIB = 1024 * 1024
MAX_KEY_BYTES = 1024  # S3's limit on a full object key (prefix included), UTF-8
_MISSING = ("404", "NoSuchKey", "NotFound")
_PRECONDITION_FAILED = ("412", "PreconditionFailed")
_CONDITIONAL_CONFLICT = ("409", "ConditionalRequestConflict")  # a concurrent conditional write: retry


class S3Store:
    """Objects in ``bucket`` under ``prefix`` on an S3-compatible endpoint.

    Args:
        bucket: bucket name (must exist; this class never creates buckets).
        prefix: key prefix inside the bucket, ``""`` for the bucket root; validated like a key.
        endpoint_url: ``None`` for AWS, else the service URL (``http://127.0.0.1:9000``).
        region: signing region; ``None`` lets boto3's chain decide (``AWS_REGION``, profile).
        addressing_style: ``auto`` | ``path`` | ``virtual`` (MinIO/Ceph usually need ``path``).
        max_attempts: total attempts per request (botocore ``standard`` retry mode).
        multipart_threshold_mb, multipart_chunk_mb: managed-transfer threshold and part size, MiB.

    Errors: :class:`~harness.store.base.InvalidKey` before any request for a bad key;
    ``FileNotFoundError`` from :meth:`get` for a missing object;
    :class:`~harness.store.base.StoreError` (naming the store and the key) when a request fails
    for good.
    """

    def __init__(self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None,
                 region: str | None = None, addressing_style: str = "auto", max_attempts: int = 8,
                 multipart_threshold_mb: float = 8, multipart_chunk_mb: float = 8):
        self.bucket = bucket
        self.prefix = check_key(prefix.strip("/")) if prefix.strip("/") else ""
        self.max_attempts = max_attempts
        # total_max_attempts counts the first attempt (AWS_MAX_ATTEMPTS' meaning); botocore's
        # retries["max_attempts"] would count retries only
        config = Config(region_name=region, retries={"mode": "standard", "total_max_attempts": max_attempts},
                        s3={"addressing_style": addressing_style})
        self.client = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)
        self.transfer = TransferConfig(multipart_threshold=int(multipart_threshold_mb * MIB),
                                       multipart_chunksize=int(multipart_chunk_mb * MIB))

    # -- keys ------------------------------------------------------------------------------
    def _full(self, key: str) -> str:
        full = f"{self.prefix}/{check_key(key)}" if self.prefix else check_key(key)
        if len(full.encode()) > MAX_KEY_BYTES:
            raise InvalidKey(f"invalid object key {key!r}: {self.describe()} key over {MAX_KEY_BYTES} bytes")
        return full

    def _failed(self, op: str, key: str, e: Exception) -> StoreError:
        if isinstance(e, ClientError):
            meta = e.response.get("ResponseMetadata", {})
            why = (f"{e.response.get('Error', {}).get('Code', '?')} (HTTP {meta.get('HTTPStatusCode', '?')}) "
                   f"after {meta.get('RetryAttempts', 0) + 1} of {self.max_attempts} attempts")
            if meta.get("RetryQuotaReached"):
                why += " (botocore's retry quota for this client is spent: the endpoint fails persistently)"
        else:
            why = f"{type(e).__name__}: {e}"
        return StoreError(f"{self.describe()}: {op} {key!r} failed: {why}")

    # -- the contract ------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        """The object's bytes; ``FileNotFoundError`` when there is none."""
        full = self._full(key)
        buf = io.BytesIO()
        try:
            self.client.download_fileobj(self.bucket, full, buf, Config=self.transfer)
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _MISSING:
                raise FileNotFoundError(errno.ENOENT, "no such object", f"s3://{self.bucket}/{full}") from None
            raise self._failed("get", key, e) from e
        except (BotoCoreError, Boto3Error) as e:
            raise self._failed("get", key, e) from e
        return buf.getvalue()

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        """Write ``data`` at ``key``. ``if_absent``: a conditional put (``If-None-Match: *``) that
        returns False and writes nothing when the object already exists."""
        full = self._full(key)
        try:
            if not if_absent:
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, full, Config=self.transfer)
                return True
            for attempt in range(1, self.max_attempts + 1):
                try:
                    self.client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
                    return True
                except ClientError as e:
                    code = e.response.get("Error", {}).get("Code")
                    if code in _PRECONDITION_FAILED:
                        return False
                    if code not in _CONDITIONAL_CONFLICT or attempt == self.max_attempts:
                        raise
            raise AssertionError("unreachable: the last attempt returns or raises")
        except (ClientError, BotoCoreError, Boto3Error) as e:
            raise self._failed("put", key, e) from e

    def exists(self, key: str) -> bool:
        full = self._full(key)
        try:
            self.client.head_object(Bucket=self.bucket, Key=full)
            return True
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in _MISSING:
                return False
            raise self._failed("exists", key, e) from e
        except BotoCoreError as e:
            raise self._failed("exists", key, e) from e

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under the "directory" ``prefix`` (``""``: all), in S3's order (UTF-8 binary,
        i.e. sorted strings), one ``ListObjectsV2`` page (up to 1,000 keys) at a time."""
        root = f"{self.prefix}/" if self.prefix else ""
        start = self._full(prefix.rstrip("/")) + "/" if prefix.strip("/") else root
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=start):
                for obj in page.get("Contents", ()):
                    yield obj["Key"][len(root):]
        except (ClientError, BotoCoreError) as e:
            raise self._failed("list", prefix, e) from e

    def describe(self) -> str:
        """``s3://bucket/prefix (endpoint)``: where the objects are; never credentials."""
        return f"s3://{self.bucket}/{self.prefix} ({self.client.meta.endpoint_url})"
