"""Object storage: one contract (``base.ObjectStore``), the local filesystem store (the embedded
default) and ``s3.S3Store`` for S3-compatible services (imported on demand: it needs boto3).
``layout`` is the only module that builds keys. See docs/storage.md."""

from harness.store.base import InvalidKey, LocalStore, ObjectStore, StoreError
from harness.store.settings import open_store

__all__ = ["InvalidKey", "LocalStore", "ObjectStore", "StoreError", "open_store"]
