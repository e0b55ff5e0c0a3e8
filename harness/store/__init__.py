"""Object storage: one interface, a local filesystem store (the embedded default) and,
in a later issue, S3. ``layout`` is the only module that builds keys."""

from harness.store.base import InvalidKey, LocalStore, ObjectStore, open_store

__all__ = ["InvalidKey", "LocalStore", "ObjectStore", "open_store"]
