"""The object store on any S3-compatible endpoint (AWS S3, MinIO, Ceph RGW, GCS interop), on boto3.

Same contract and key layout as :class:`~harness.store.base.LocalStore`: the object of key ``k``
is ``s3://<bucket>/<prefix>/k``. Credentials come only from boto3's standard chain (environment,
shared config/credentials profile, container or instance role, web identity / service-account
token); nothing here takes, stores or prints a secret. Each request is retried by botocore's
``standard`` retry mode (``max_attempts`` in all; exponential backoff with jitter on 5xx,
throttling and connection errors). Puts and gets go through boto3's managed transfers
(``upload_fileobj``/``download_fileobj`` with a :class:`~boto3.s3.transfer.TransferConfig`), so
objects from ``multipart_threshold_mb`` on move in parallel parts. A conditional put is one
``PutObject`` with ``If-None-Match: *`` (S3's limit for one PUT: 5 GiB). Several S3-compatible
servers ignore that header, which would let two writers both "win" a marker: :meth:`S3Store.probe`
detects it (once per endpoint, bucket and prefix in a process, and before the first conditional
put at the latest) and refuses such a store. See docs/storage.md.
"""

from __future__ import annotations

import errno
import io
import threading
from collections.abc import Iterator

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from harness.store.base import InvalidKey, StoreError, check_key, conditional_put_problem

MIB = 1024 * 1024
MAX_KEY_BYTES = 1024  # S3's limit on a full object key (prefix included), UTF-8
_MISSING = ("404", "NoSuchKey", "NotFound")
_PRECONDITION_FAILED = ("412", "PreconditionFailed")
_CONDITIONAL_CONFLICT = ("409", "ConditionalRequestConflict")  # a concurrent conditional write: retry
# Fields of an S3 error body that say what was refused and can hold no secret; others can
# (SignatureDoesNotMatch's CanonicalRequest holds the session token, InvalidToken's Token-0 the token)
_ERROR_DETAIL_FIELDS = ("Header", "Condition", "ArgumentName", "Method", "ResourceType")
_MAX_SERVER_MESSAGE = 200  # characters of the server's own message kept in a StoreError
# Probe results per (endpoint, bucket, prefix) in this process: None (conditional puts are
# honoured) or what is wrong. A probe that could not run (a request failed) is not cached.
_PROBED: dict[tuple[str, str, str], str | None] = {}
_PROBE_LOCK = threading.Lock()


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
    :class:`~harness.store.base.StoreError` (naming the store and the key, and carrying the
    server's error code, HTTP status and own message) when a request fails for good, and from
    :meth:`probe` and conditional puts when the endpoint ignores ``If-None-Match: *``.
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
        """``<store>: <op> <key> failed: <Code> (HTTP <status>, after <n> of <max> attempts):
        <server's message> [<Header: ...>]``; of the error body only the server's message (at most
        :data:`_MAX_SERVER_MESSAGE` characters) and :data:`_ERROR_DETAIL_FIELDS`, never a secret."""
        if isinstance(e, ClientError):
            err = e.response.get("Error", {})
            meta = e.response.get("ResponseMetadata", {})
            why = (f"{err.get('Code', '?')} (HTTP {meta.get('HTTPStatusCode', '?')}, "
                   f"after {meta.get('RetryAttempts', 0) + 1} of {self.max_attempts} attempts)")
            message = " ".join(str(err.get("Message") or "").split())
            if message:
                cut = len(message) > _MAX_SERVER_MESSAGE
                why += f": {message[:_MAX_SERVER_MESSAGE]}{'...' if cut else ''}"
            details = [f"{f}: {' '.join(str(err[f]).split())[:100]}" for f in _ERROR_DETAIL_FIELDS if err.get(f)]
            if details:
                why += f" [{'; '.join(details)}]"
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
        returns False and writes nothing when the object already exists; the first one in a
        process runs :meth:`probe` first and raises its ``StoreError`` if the endpoint fails it."""
        full = self._full(key)  # a bad key raises before any request, the probe's included
        if not if_absent:
            try:
                self.client.upload_fileobj(io.BytesIO(data), self.bucket, full, Config=self.transfer)
            except (ClientError, BotoCoreError, Boto3Error) as e:
                raise self._failed("put", key, e) from e
            return True
        try:
            problem = self._probe_problem()
        except StoreError as e:
            where = f"{self.describe()}: "
            raise StoreError(f"{where}put {key!r} failed: conditional-put probe: {str(e).removeprefix(where)}") from e
        if problem:
            raise StoreError(f"{self.describe()}: put {key!r} refused: {problem}")
        return self._put_if_absent(key, data)

    def _put_if_absent(self, key: str, data: bytes) -> bool:
        """One ``PutObject`` with ``If-None-Match: *``, retried on 409; False on 412 (exists)."""
        full = self._full(key)
        try:
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

    LIST_PAGE = 1000  # keys per ListObjectsV2 request (S3's maximum)

    def list(self, prefix: str) -> Iterator[str]:
        """Keys under the "directory" ``prefix`` (``""``: all), in S3's order (UTF-8 binary,
        i.e. sorted strings), one ``ListObjectsV2`` page (up to :attr:`LIST_PAGE` keys) at a time.

        A truncated page is never taken for the end: the next page is asked with its
        ``NextContinuationToken``, or, when an S3-compatible server omits the token, with
        ``StartAfter`` the page's last key (botocore's paginator would stop there and return a
        partial listing). Raises :class:`~harness.store.base.StoreError` naming the endpoint when a
        truncated page has neither a token nor a key to continue after."""
        root = f"{self.prefix}/" if self.prefix else ""
        start = self._full(prefix.rstrip("/")) + "/" if prefix.strip("/") else root
        ask: dict[str, str | int] = {"Bucket": self.bucket, "Prefix": start, "MaxKeys": self.LIST_PAGE}
        while True:
            try:
                page = self.client.list_objects_v2(**ask)
            except (ClientError, BotoCoreError) as e:
                raise self._failed("list", prefix, e) from e
            keys = [obj["Key"] for obj in page.get("Contents", ())]
            for key in keys:
                yield key[len(root):]
            if not page.get("IsTruncated"):
                return
            ask = {k: v for k, v in ask.items() if k not in ("ContinuationToken", "StartAfter")}
            if page.get("NextContinuationToken"):
                ask["ContinuationToken"] = page["NextContinuationToken"]
            elif keys:
                ask["StartAfter"] = keys[-1]
            else:
                raise StoreError(f"{self.describe()}: listing {prefix!r} stopped early: a page marked truncated "
                                 "had no continuation token and no key to continue after")

    def describe(self) -> str:
        """``s3://bucket/prefix (endpoint)``: where the objects are; never credentials."""
        return f"s3://{self.bucket}/{self.prefix} ({self.client.meta.endpoint_url})"

    def probe(self) -> None:
        """Check that the endpoint honours conditional puts (``If-None-Match: *``) under this
        bucket and prefix: a second conditional put of :data:`~harness.store.base.PROBE_KEY`
        must be refused with 412 and leave the object unchanged (the object stays; see
        :func:`~harness.store.base.conditional_put_problem`). Runs once per endpoint, bucket and
        prefix in a process. Raises :class:`~harness.store.base.StoreError` naming the endpoint
        when it does not, or when a probe request fails for good."""
        problem = self._probe_problem()
        if problem:
            raise StoreError(f"{self.describe()}: {problem}")

    def _probe_problem(self) -> str | None:
        """The cached probe result (see :meth:`probe`); probes on first use."""
        where = (str(self.client.meta.endpoint_url), self.bucket, self.prefix)
        with _PROBE_LOCK:
            if where not in _PROBED:
                problem = conditional_put_problem(self._put_if_absent, self.get)
                _PROBED[where] = problem and (
                    f"{problem}: this endpoint does not honour conditional puts (If-None-Match: *, which must be "
                    "answered 412 PreconditionFailed for an existing object), so two attempts could both win a "
                    "shard marker and overwrite a frozen shard plan; this store is refused. Use a service or "
                    "version that honours conditional writes (docs/storage.md, 'The probe')")
            return _PROBED[where]
