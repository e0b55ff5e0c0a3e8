"""The object-store contract (tests/fixtures/store_contract.py) over LocalStore and S3Store (real
HTTP against a local moto server, through a seeded fault-injecting proxy); S3 multipart,
pagination, retries and secrets; key and id validation (no key can escape the store's root or
prefix)."""

from __future__ import annotations

import errno
import logging
import os
import re
import stat
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from harness.runtime.config import ConfigError, RunConfig
from harness.store.base import PROBE_KEY, InvalidKey, LocalStore, StoreError, check_key
from harness.store.layout import RunLayout, check_id, settings_hash
from harness.store.s3 import S3Store
from harness.store.settings import StoreSettings, open_store
from tests.fixtures.s3 import S3Endpoint, aws_test_env
from tests.fixtures.store_contract import BAD_KEYS, StoreContract, exactly, starts

CONF_S3 = Path(__file__).resolve().parents[2] / "conf" / "store" / "s3.yaml"
SECRET = "SENTINEL-secret-7f3a9c"  # must never show up anywhere


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """The contract's store: LocalStore, and S3Store on moto through the fault proxy under a prefix
    (to check it is applied); on a real SeaweedFS server: tests/e2e/test_store_seaweedfs.py."""
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    ep: S3Endpoint = request.getfixturevalue("s3")
    return open_store(StoreSettings(**ep.store_settings(prefix="pre/fix")))


class TestStoreContract(StoreContract):
    def requests_sent(self, request) -> list | None:
        if request.node.callspec.params["store"] == "s3":
            return request.getfixturevalue("s3").proxy.requests  # the proxy counts every request
        return None


def test_same_key_layout_on_both_backends(tmp_path, s3):
    """A run's keys land at the same relative place: <root>/<key> and s3://bucket/<prefix>/<key>."""
    lay = RunLayout("demo")
    keys = [lay.run_manifest(), lay.marker(lay.stage("scenes", "abc")),
            lay.conversation(lay.shard(lay.stage("infer", "h1", "oracle"), "shard-00000"), "p1-explicit", "flac")]
    local = LocalStore(tmp_path)
    remote = open_store(StoreSettings(**s3.store_settings(prefix="team/runs")))
    for k in keys:
        local.put(k, k.encode())
        remote.put(k, k.encode())
    assert list(local.list("")) == list(remote.list("")) == sorted(keys)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()) == sorted(keys)
    listed = s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]
    assert sorted(o["Key"] for o in listed) == sorted(f"team/runs/{k}" for k in keys)


def test_describe(tmp_path, s3):
    assert LocalStore(tmp_path).describe() == f"local:{tmp_path.resolve()}"
    remote = open_store(StoreSettings(**s3.store_settings(prefix="/a/b/")))
    assert remote.describe() == f"s3://{s3.bucket}/a/b ({s3.endpoint_url})"


def test_local_store_leaves_nothing_outside_its_root(tmp_path):
    with pytest.raises(InvalidKey, match=r"^invalid object key '\.\./outside': empty, '\.' or '\.\.' path part$"):
        LocalStore(tmp_path / "root").put("../outside", b"x")
    assert not (tmp_path / "outside").exists()
    s = LocalStore(tmp_path / "root")
    s.put("k", b"1", if_absent=True)
    s.put("k", b"2", if_absent=True)
    assert [p.name for p in (tmp_path / "root").iterdir()] == ["k"]  # no temp file left behind


@pytest.mark.parametrize(("umask", "file_mode", "dir_mode"), [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_local_files_follow_the_umask(tmp_path, umask, file_mode, dir_mode):
    """Files 0666 and directories 0777 less the umask, as other tools make them (not mkstemp's 0600)."""
    old = os.umask(umask)
    try:
        store = LocalStore(tmp_path / "root")
        store.put("a/b/plain.json", b"1")
        store.put("a/c/once.json", b"1", if_absent=True)
        store.put("a/b/plain.json", b"2")  # a replacement gets the same mode
    finally:
        os.umask(old)
    root = tmp_path / "root"
    modes = {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}
    assert modes == {".": dir_mode, "a": dir_mode, "a/b": dir_mode, "a/c": dir_mode,
                     "a/b/plain.json": file_mode, "a/c/once.json": file_mode}


# -- the probe: is the store writable, does a conditional put refuse an existing object -------------
def test_local_probe_passes_and_leaves_one_object(tmp_path):
    store = LocalStore(tmp_path)
    store.probe()
    store.probe()  # again: the object exists already, still passes
    assert list(store.list("")) == [PROBE_KEY]
    assert b"conditional-put probe" in store.get(PROBE_KEY)


def test_a_local_root_that_is_a_file_is_a_store_error(tmp_path):
    (tmp_path / "runs").write_text("not a folder")
    with pytest.raises(StoreError, match=rf"^local:{re.escape(str(tmp_path / 'runs'))}: not usable as a store: "
                                         "FileExistsError"):
        LocalStore(tmp_path / "runs")


def test_local_probe_refuses_a_disk_without_hard_links(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)

    def no_links(src, dst):
        raise PermissionError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    message = f"local:{tmp_path.resolve()}: not usable as a store: PermissionError: [Errno 1] Operation not permitted"
    with pytest.raises(StoreError, match=exactly(message)):
        store.probe()


@pytest.mark.parametrize(("answer", "problem"), [
    (True, "a conditional put (create only if absent) of the existing probe object '{}' was accepted "
           "instead of refused"),
    (False, "a refused conditional put of the existing probe object '{}' overwrote it anyway"),
])
def test_probe_refuses_a_store_whose_conditional_put_overwrites(tmp_path, answer, problem):
    class Overwriting(LocalStore):  # if_absent ignored, like a server that ignores If-None-Match
        def put(self, key, data, if_absent=False):
            existed = self.exists(key)
            super().put(key, data)
            return answer or not existed  # answer: what it says when the object existed

    store = Overwriting(tmp_path)
    message = f"local:{tmp_path.resolve()}: {problem.format(PROBE_KEY)}"
    with pytest.raises(StoreError, match=exactly(message)):
        store.probe()


def test_s3_probe_passes_on_an_honest_server_once_per_process(s3):
    store = open_store(StoreSettings(**s3.store_settings(prefix="team")))
    store.probe()
    probe_path = f"/{s3.bucket}/team/{PROBE_KEY}"
    # conditional PUT (created), HEAD+GET, conditional PUT refused with 412, HEAD+GET
    assert s3.proxy.requests == [("PUT", probe_path, 200), ("HEAD", probe_path, 200), ("GET", probe_path, 200),
                                 ("PUT", probe_path, 412), ("HEAD", probe_path, 200), ("GET", probe_path, 200)]
    again = open_store(StoreSettings(**s3.store_settings(prefix="team")))
    again.probe()
    assert again.put("run/plan.json", b"1", if_absent=True) is True
    assert len(s3.proxy.requests) == 7  # the result is cached per endpoint, bucket and prefix: one more PUT


def test_s3_first_conditional_put_probes_first(s3):
    store = open_store(StoreSettings(**s3.store_settings(prefix="team")))
    assert store.put("run/plan.json", b"1", if_absent=True) is True
    assert [p for _, p, _ in s3.proxy.requests] == [f"/{s3.bucket}/team/{PROBE_KEY}"] * 6 + [
        f"/{s3.bucket}/team/run/plan.json"]


def test_s3_probe_refuses_an_endpoint_that_ignores_if_none_match(s3):
    s3.proxy.ignore_if_none_match = True
    store = open_store(StoreSettings(**s3.store_settings(prefix="team")))
    where = f"s3://{s3.bucket}/team ({s3.endpoint_url}): "
    refused = (f"a conditional put (create only if absent) of the existing probe object '{PROBE_KEY}' was accepted "
               "instead of refused: this endpoint does not honour conditional puts (If-None-Match: *")
    with pytest.raises(StoreError, match=starts(where + refused)) as err:
        store.probe()
    assert "testing" not in str(err.value) and "dummy-secret" not in str(err.value)
    n = len(s3.proxy.requests)
    with pytest.raises(StoreError, match=starts(f"{where}put 'run/plan.json' refused: {refused}")):
        store.put("run/plan.json", b"1", if_absent=True)
    assert len(s3.proxy.requests) == n  # the refusal is cached: no request, nothing written
    assert not store.exists("run/plan.json")


# -- S3: multipart, pagination, key length ---------------------------------------------------
def test_multipart_upload_and_ranged_download(s3):
    store = open_store(StoreSettings(**s3.store_settings(multipart_threshold_mb=5, multipart_chunk_mb=5)))
    data = bytes(range(256)) * (11 * 4096)  # 11 MiB: three parts of 5, 5 and 1 MiB
    assert store.put("big/object.bin", data)
    assert s3.client().head_object(Bucket=s3.bucket, Key="big/object.bin")["ETag"].endswith('-3"')
    parts = [p for m, p, _ in s3.proxy.requests if m == "PUT" and "partNumber=" in p]
    assert len(parts) == 3
    n = len(s3.proxy.requests)
    assert store.get("big/object.bin") == data
    ranged = [p for m, p, status in s3.proxy.requests[n:] if m == "GET" and status == 206]
    assert len(ranged) == 3  # parallel ranged GETs, one per part
    small = open_store(StoreSettings(**s3.store_settings()))  # default threshold 8 MiB: one PUT
    small.put("small.bin", data[: 1024 * 1024])
    assert "-" not in s3.client().head_object(Bucket=s3.bucket, Key="small.bin")["ETag"]


def test_list_paginates_past_1000_keys(s3):
    keys = [f"pre/many/{i:05d}" for i in range(1001)] + ["pre/other/x", "elsewhere/y"]
    s3.seed({k: b"" for k in keys})
    store = open_store(StoreSettings(**s3.store_settings(prefix="pre")))
    listed = list(store.list("many"))
    assert listed == [f"many/{i:05d}" for i in range(1001)]
    pages = [p for m, p, _ in s3.proxy.requests if m == "GET" and "list-type=2" in p]
    assert len(pages) == 2 and "continuation-token=" in pages[1]
    assert list(store.list("")) == [*listed, "other/x"]


def test_a_truncated_listing_without_a_continuation_token_goes_on_after_the_last_key(s3, monkeypatch):
    """An S3-compatible server that marks a page truncated but sends no NextContinuationToken:
    botocore's paginator would stop after the first page; the store continues with StartAfter."""
    keys = [f"pre/many/{i:04d}" for i in range(25)]
    s3.seed({k: b"" for k in keys})
    monkeypatch.setattr(S3Store, "LIST_PAGE", 10)
    store = open_store(StoreSettings(**s3.store_settings(prefix="pre")))
    s3.proxy.rewrite_listing = lambda body: re.sub(rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"",
                                                   body)
    assert list(store.list("many")) == [k.removeprefix("pre/") for k in keys]
    pages = [p for m, p, _ in s3.proxy.requests if m == "GET" and "list-type=2" in p]
    assert len(pages) == 3
    assert "start-after=pre%2Fmany%2F0009" in pages[1] and "start-after=pre%2Fmany%2F0019" in pages[2]
    # truncated, no token and no key to continue after: an error naming the endpoint, never a partial list
    s3.proxy.rewrite_listing = lambda body: re.sub(rb"<Contents>.*?</Contents>", b"", re.sub(
        rb"<NextContinuationToken>[^<]*</NextContinuationToken>", b"", body), flags=re.S)
    with pytest.raises(StoreError, match=re.escape(store.describe()) + ".*stopped early"):
        list(store.list("many"))


def test_key_over_s3_limit_rejected(s3):
    store = open_store(StoreSettings(**s3.store_settings(prefix="p")))
    store.put("k" * 1022, b"")  # "p/" + 1022 = 1024 bytes: the limit
    with pytest.raises(InvalidKey, match="1024"):
        store.put("k" * 1023, b"")


# -- S3 faults: retries, clear errors, no secret -------------------------------------------------
def test_every_operation_succeeds_through_30_percent_faults(s3):
    store = open_store(StoreSettings(**s3.store_settings(max_attempts=10, multipart_threshold_mb=5,
                                                         multipart_chunk_mb=5)))
    s3.proxy.fail_rate = 0.3
    blobs = {f"f/{i:02d}": bytes([i]) * (100 + i) for i in range(12)}
    for k, v in blobs.items():
        assert store.put(k, v)
    big = bytes(range(256)) * (6 * 4096)  # 6 MiB: multipart under faults
    assert store.put("f/big", big)
    assert all(store.get(k) == v for k, v in blobs.items()) and store.get("f/big") == big
    assert all(store.exists(k) for k in blobs) and not store.exists("f/none")
    with pytest.raises(FileNotFoundError, match="f/none"):
        store.get("f/none")
    assert list(store.list("f")) == sorted([*blobs, "f/big"])
    assert store.put("f/plan.json", b"once", if_absent=True) is True
    assert store.put("f/plan.json", b"twice", if_absent=True) is False
    assert store.get("f/plan.json") == b"once"
    assert s3.proxy.injected[500] > 0 and s3.proxy.injected[503] > 0  # faults really happened, all retried


def test_concurrent_conditional_write_conflict_is_retried(s3):
    """S3 answers 409 ConditionalRequestConflict while another conditional write is in flight;
    botocore does not retry it, the store does."""
    store = open_store(StoreSettings(**s3.store_settings()))
    store.probe()  # its GETs before the faults: S3 answers only conditional writes with 409
    s3.proxy.statuses = (409,)
    s3.proxy.fail_rate = 0.5
    for i in range(5):
        assert store.put(f"plan-{i}.json", b"1", if_absent=True) is True
        assert store.put(f"plan-{i}.json", b"2", if_absent=True) is False
    assert s3.proxy.injected[409] > 0
    s3.proxy.fail_rate = 0
    assert all(store.get(f"plan-{i}.json") == b"1" for i in range(5))


def test_persistent_faults_fail_with_a_clear_error_and_no_secret(s3, caplog):
    caplog.set_level(logging.DEBUG)  # everything, botocore's debug log included
    with aws_test_env(secret=SECRET):
        store = open_store(StoreSettings(**s3.store_settings(max_attempts=3)))
        store.put("ok", b"1")
        s3.proxy.fail_rate = 1.0
        ops = {"put": lambda: store.put("run/x.json", b"1"), "get": lambda: store.get("run/x.json"),
               "exists": lambda: store.exists("run/x.json"), "list": lambda: list(store.list("run/x.json")),
               "put-if-absent": lambda: store.put("run/x.json", b"1", if_absent=True)}
        messages = []
        for op in ops.values():
            with pytest.raises(StoreError, match=r"'run/x\.json' failed: ") as err:
                op()
            messages.append(str(err.value))
    for msg in messages:
        assert f"s3://{s3.bucket}/" in msg and "'run/x.json'" in msg and "failed" in msg
        assert SECRET not in msg and "testing" not in msg  # neither the secret nor the access key id
    assert "after 3 of 3 attempts" in messages[0]
    assert s3.proxy.injected.total() > 0
    assert SECRET not in caplog.text and SECRET not in store.describe() and SECRET not in repr(vars(store))


def test_store_error_keeps_the_servers_message(s3):
    """The server's code, status, own message and the refused header, never a secret field."""
    store = open_store(StoreSettings(**s3.store_settings(max_attempts=3)))
    s3.proxy.statuses = (501,)
    s3.proxy.error_message = "A header you provided implies functionality that is not implemented"
    s3.proxy.error_fields = {"Header": "If-None-Match", "Token-0": SECRET}
    s3.proxy.fail_rate = 1.0
    why = ("NotImplemented (HTTP 501, after 1 of 3 attempts): A header you provided implies functionality that "
           "is not implemented [Header: If-None-Match]")  # 501 is not retried
    where = f"s3://{s3.bucket}/ ({s3.endpoint_url}): "
    with pytest.raises(StoreError, match=exactly(f"{where}put 'run/x.json' failed: {why}")):
        store.put("run/x.json", b"1")
    with pytest.raises(StoreError, match=exactly(f"{where}put '{PROBE_KEY}' failed: {why}")):
        store.probe()  # a server that refuses the conditional put's header outright
    with pytest.raises(StoreError, match=exactly(f"{where}put 'run/_SUCCESS.json' failed: conditional-put probe: "
                                                 f"put '{PROBE_KEY}' failed: {why}")):
        store.put("run/_SUCCESS.json", b"1", if_absent=True)  # the probe did not pass: tried again, same answer
    assert s3.proxy.injected[501] == 3


def test_no_credentials_is_a_clear_error(s3, monkeypatch):
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    store = open_store(StoreSettings(**s3.store_settings()))
    with pytest.raises(StoreError, match=r"put 'k' failed: NoCredentialsError"):
        store.put("k", b"1")
    assert s3.proxy.requests == []


def test_missing_bucket_names_it(s3):
    store = open_store(StoreSettings(**s3.store_settings(bucket="no-such-bucket")))
    with pytest.raises(StoreError, match=r"s3://no-such-bucket/ .*put 'k' failed: NoSuchBucket"):
        store.put("k", b"1")


# -- config ---------------------------------------------------------------------------------------
def test_s3_config_file_builds_store_settings():
    values = OmegaConf.to_container(OmegaConf.load(CONF_S3))
    assert values["bucket"] == "???"  # required: the entry points refuse to run without it
    settings = StoreSettings(**{**values, "bucket": "my-bucket"})
    assert (settings.kind, settings.endpoint_url, settings.addressing_style) == ("s3", None, "auto")
    assert not any(word in name for name in values for word in ("secret", "key_id", "token", "password"))


def test_open_store_picks_the_backend(tmp_path, s3):
    assert isinstance(open_store(StoreSettings(root=str(tmp_path))), LocalStore)
    assert isinstance(open_store(StoreSettings(**s3.store_settings())), S3Store)


@pytest.mark.parametrize(("values", "match"), [
    ({"kind": "gcs"}, "kind 'gcs'"),
    ({"kind": "s3"}, "needs a bucket"),
    ({"kind": "s3", "bucket": "b", "addressing_style": "dns"}, "addressing_style"),
    ({"kind": "s3", "bucket": "b", "max_attempts": 0}, "max_attempts"),
    ({"kind": "s3", "bucket": "b", "multipart_chunk_mb": 0}, "multipart"),
    ({"kind": "s3", "bucket": "b", "prefix": "a/../b"}, "invalid object key"),
    ({"kind": "s3", "bucket": "b", "endpoint_url": "minio:9000"}, "http:// or https://"),
])
def test_bad_store_settings_rejected(values, match):
    with pytest.raises(ConfigError, match=match):
        RunConfig.from_dict({"model": {"silent": {"target": "silent"}}, "store": values})


def test_credentials_cannot_enter_the_config():
    base = {"kind": "s3", "bucket": "b"}
    with pytest.raises(ConfigError, match="unknown keys") as err:
        RunConfig.from_dict({"model": {"silent": {"target": "silent"}},
                             "store": {**base, "aws_secret_access_key": SECRET}})
    assert SECRET not in str(err.value)
    with pytest.raises(ConfigError, match=r"store\.endpoint_url: a URL holds credentials") as err:
        RunConfig.from_dict({"model": {"silent": {"target": "silent"}},
                             "store": {**base, "endpoint_url": f"https://user:{SECRET}@minio:9000"}})
    assert SECRET not in str(err.value)


# -- keys and ids -------------------------------------------------------------------------------
@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_rejected(key):
    with pytest.raises(InvalidKey, match=starts(f"invalid object key {key!r}: ")):
        check_key(key)


@pytest.mark.parametrize("run_id", ["..", "a/b", "", "x\ty", "_cache", "_x", ".hidden", "a\x85b", "../x"])
def test_bad_run_id(run_id):
    with pytest.raises(InvalidKey, match=starts(f"invalid run id {run_id!r}")):
        RunLayout(run_id)


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "/abs", "_SUCCESS", ".tmp-x", "x\ny", "", "a\\b"])
def test_ids_cannot_escape_their_prefix(bad):
    lay = RunLayout("demo")
    prefix = lay.stage("infer", "h1", "oracle")
    for build in (lambda: lay.conversation(prefix, bad, "json"), lambda: lay.shard(prefix, bad),
                  lambda: lay.stage("infer", "h1", bad), lambda: lay.clip(prefix, bad)):
        with pytest.raises(InvalidKey, match=r"invalid (scene|shard|clip) id|invalid model name"):
            build()
    assert check_id("p001-explicit", "scene id") == "p001-explicit"


def test_settings_hash_chains_upstream():
    assert settings_hash({"a": 1}) == settings_hash({"a": 1})
    assert settings_hash({"a": 1}, "up1") != settings_hash({"a": 1}, "up2")
    assert settings_hash({"a": 1}) != settings_hash({"a": 2})
