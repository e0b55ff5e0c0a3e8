"""LocalStore semantics and key validation (no key can escape the store's root)."""

from __future__ import annotations

import pytest

from harness.store.base import InvalidKey, LocalStore, check_key
from harness.store.layout import RunLayout, settings_hash


def test_put_get_exists_list(tmp_path):
    s = LocalStore(tmp_path)
    assert s.put("r/a/x.json", b"1")
    assert s.get("r/a/x.json") == b"1" and s.exists("r/a/x.json") and not s.exists("r/a/y.json")
    s.put("r/b/y.bin", b"2")
    assert list(s.list("r")) == ["r/a/x.json", "r/b/y.bin"]
    assert list(s.list("r/a")) == ["r/a/x.json"]
    assert list(s.list("nothing")) == []
    with pytest.raises(FileNotFoundError):
        s.get("r/missing")


def test_conditional_put_never_overwrites(tmp_path):
    s = LocalStore(tmp_path)
    assert s.put("k", b"first", if_absent=True) is True
    assert s.put("k", b"second", if_absent=True) is False
    assert s.get("k") == b"first"
    s.put("k", b"third")
    assert s.get("k") == b"third"
    assert [p.name for p in tmp_path.iterdir()] == ["k"]  # no temp file left behind


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "..", "a//b", "a/./b", "a\\b", "a\nb", "a\x00b", "a/"])
def test_bad_keys_rejected(key):
    with pytest.raises(InvalidKey):
        check_key(key)


def test_store_rejects_escaping_key(tmp_path):
    with pytest.raises(InvalidKey):
        LocalStore(tmp_path / "root").put("../outside", b"x")
    assert not (tmp_path / "outside").exists()


@pytest.mark.parametrize("run_id", ["..", "a/b", "", "x\ty"])
def test_bad_run_id(run_id):
    with pytest.raises(ValueError):
        RunLayout(run_id)


def test_settings_hash_chains_upstream():
    assert settings_hash({"a": 1}) == settings_hash({"a": 1})
    assert settings_hash({"a": 1}, "up1") != settings_hash({"a": 1}, "up2")
    assert settings_hash({"a": 1}) != settings_hash({"a": 2})
