"""The object-store contract (tests/fixtures/store_contract.py) on S3Store against a real SeaweedFS
server (tests/fixtures/seaweed.py), not a mock; skipped, saying why, where the `weed` binary cannot
start. Where SeaweedFS differs from AWS S3 by design the test is an expected failure, naming why."""

from __future__ import annotations

import pytest

from harness.store.settings import StoreSettings, open_store
from tests.fixtures.seaweed import SeaweedEndpoint
from tests.fixtures.store_contract import StoreContract

# Where SeaweedFS (4.48) differs from AWS S3 by design; docs/storage.md says what follows.
SEAWEEDFS_DIVERGES = {
    "test_list_is_sorted_as_strings": "SeaweedFS lists keys in directory-tree order (x/a/b before x/a-c), "
                                      "not S3's UTF-8 binary order; the harness does not depend on the order",
}


@pytest.fixture
def store(request, seaweed_s3: SeaweedEndpoint):
    """A fresh bucket of the session's SeaweedFS server, under a prefix (to check it is applied)."""
    if request.node.originalname in SEAWEEDFS_DIVERGES:
        request.applymarker(pytest.mark.xfail(strict=True, reason=SEAWEEDFS_DIVERGES[request.node.originalname]))
    return open_store(StoreSettings(**seaweed_s3.store_settings(prefix="pre/fix")))


class TestStoreContract(StoreContract):
    pass
