"""Where a run's objects live: the store's settings (conf/store/; docs/storage.md)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.store.base import LocalStore, ObjectStore, check_key


@dataclass(frozen=True)
class StoreSettings:
    """Where a run's objects live (docs/storage.md). There is no credentials field on purpose:
    S3 credentials come only from boto3's standard chain (environment, profile, role)."""

    kind: str = "local"  # local | s3
    root: str = "runs"  # local: the store's directory; every kind: where Hydra writes its logs
    bucket: str | None = None  # s3 only, required
    prefix: str = ""  # s3: key prefix inside the bucket ("" = bucket root)
    endpoint_url: str | None = None  # s3: None = AWS; e.g. http://minio:9000, https://storage.googleapis.com
    region: str | None = None  # s3: None = boto3's chain (AWS_REGION, profile)
    addressing_style: str = "auto"  # s3: auto | path | virtual
    max_attempts: int = 8  # s3: botocore standard retry mode, total attempts per request
    multipart_threshold_mb: float = 8  # s3: objects from this size (MiB) use multipart transfers
    multipart_chunk_mb: float = 8  # s3: part size (MiB; S3's minimum is 5, boto3 raises smaller ones)

    def __post_init__(self) -> None:
        if self.kind not in ("local", "s3"):
            raise ValueError(f"kind {self.kind!r} is not one of: local, s3")
        if self.kind == "s3" and not self.bucket:
            raise ValueError("kind s3 needs a bucket")
        if self.prefix.strip("/"):
            check_key(self.prefix.strip("/"))
        if self.addressing_style not in ("auto", "path", "virtual"):
            raise ValueError(f"addressing_style {self.addressing_style!r} is not one of: auto, path, virtual")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        if not (self.multipart_threshold_mb > 0 and self.multipart_chunk_mb > 0):
            raise ValueError("multipart_threshold_mb and multipart_chunk_mb must be > 0")
        if self.endpoint_url is not None:
            url = urlsplit(self.endpoint_url)
            if url.scheme not in ("http", "https") or not url.hostname:
                raise ValueError("endpoint_url must be an http:// or https:// URL with a host")
            if url.username is not None or url.password is not None:  # the URL itself is never echoed
                raise ValueError("endpoint_url must not hold credentials; use boto3's credential chain")


def open_store(settings: StoreSettings) -> ObjectStore:
    """Build the store that config ``store`` names: ``kind: local`` -> :class:`LocalStore` at
    ``root``; ``kind: s3`` -> :class:`harness.store.s3.S3Store` (boto3 is imported only then).
    ``StoreSettings`` has already validated the values (``ConfigError`` otherwise)."""
    if settings.kind == "local":
        return LocalStore(settings.root)
    from harness.store.s3 import S3Store

    return S3Store(settings.bucket, settings.prefix, endpoint_url=settings.endpoint_url, region=settings.region,
                   addressing_style=settings.addressing_style, max_attempts=settings.max_attempts,
                   multipart_threshold_mb=settings.multipart_threshold_mb,
                   multipart_chunk_mb=settings.multipart_chunk_mb)
