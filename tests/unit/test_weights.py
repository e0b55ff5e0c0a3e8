"""harness.weights.local_weights against a fake hub cache (HF_HUB_CACHE in a tmp dir, laid out as
huggingface_hub lays it out); nothing here reaches the network."""

import re

import pytest

from harness.weights import WeightsNotFoundError, local_weights

REPO = "acme/tiny-model"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A hub cache holding REPO at COMMIT, with refs/main and refs/v1 pointing at it."""
    import huggingface_hub.constants

    root = tmp_path / "hub"
    snap = root / "models--acme--tiny-model" / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{}")
    refs = root / "models--acme--tiny-model" / "refs"
    refs.mkdir()
    (refs / "main").write_text(COMMIT)
    (refs / "v1").write_text(COMMIT)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # belt and braces: a request would fail, not fetch
    return root, snap


def test_a_folder_is_returned_as_is(tmp_path):
    assert local_weights(tmp_path) == tmp_path
    assert local_weights(str(tmp_path), "ignored") == tmp_path


def test_a_cached_repo_resolves_to_its_snapshot_at_the_revision(cache):
    _, snap = cache
    assert local_weights(REPO) == snap  # no revision: main
    assert local_weights(REPO, "v1") == snap
    assert local_weights(REPO, COMMIT) == snap
    assert (local_weights(REPO) / "config.json").is_file()


def test_a_missing_repo_or_revision_names_repo_revision_cache_and_the_prefetch_command(cache):
    root, _ = cache
    with pytest.raises(WeightsNotFoundError) as e:
        local_weights("acme/absent", "abc")
    msg = str(e.value)
    assert msg.startswith("weights acme/absent@abc are not in the Hugging Face cache: looked for acme/absent at "
                          f"revision abc in the local Hugging Face cache {root}; the harness never downloads")
    assert "fetch them where that cache is mounted with `HF_HUB_CACHE=" in msg
    assert "huggingface-cli download acme/absent --revision abc`" in msg
    with pytest.raises(FileNotFoundError, match=re.escape("my model acme/tiny-model@v9 are not in")):
        local_weights(REPO, "v9", what="my model acme/tiny-model@v9")  # a revision the cache lacks


def test_neither_folder_nor_repo_id(tmp_path):
    with pytest.raises(WeightsNotFoundError, match="is neither a directory nor a Hugging Face repo id"):
        local_weights(tmp_path / "absent")


def test_download_only_on_explicit_opt_in(cache, monkeypatch):
    import huggingface_hub

    seen = []

    def fake(repo, local_files_only, **kw):
        seen.append((repo, local_files_only, kw))
        return "/somewhere"

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    local_weights(REPO, "v1")
    local_weights(REPO, allow_download=True)
    assert seen == [(REPO, True, {"revision": "v1"}), (REPO, False, {})]


# -- what a model needs: Repo, pin_problem, missing_files, locate, loaded ------------------------------
def test_a_sharded_checkpoint_needs_every_shard_its_index_names_and_one_of_each_group(tmp_path):
    import json

    from harness.weights import Repo, missing_files

    repo = Repo(str(tmp_path), None, ("config.json",), (("model.safetensors.index.json", "model.safetensors"),
                                                        ("tokenizer.json", "vocab.json")))
    assert missing_files(tmp_path, repo) == ["config.json", "model.safetensors.index.json | model.safetensors",
                                             "tokenizer.json | vocab.json"]
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "vocab.json").write_text("{}")
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"a": "m-1.st", "b": "m-2.st",
                                                                                      "c": "m-1.st"}}))
    (tmp_path / "m-1.st").write_bytes(b"")
    assert missing_files(tmp_path, repo) == ["m-2.st"]  # the index is there, one of its shards is not
    (tmp_path / "m-2.st").write_bytes(b"")
    assert missing_files(tmp_path, repo) == []
    (tmp_path / "model.safetensors.index.json").write_text("[1]")
    assert missing_files(tmp_path, repo) == ["model.safetensors.index.json (not a checkpoint index with a weight_map)"]


def test_a_repo_id_needs_a_commit_a_folder_does_not(cache, tmp_path):
    from harness.weights import Repo, loaded, locate, pin_problem

    for rev in (None, "main", "v1", COMMIT[:12]):
        assert "not a commit: pin the 40-hex commit" in pin_problem(Repo(REPO, rev), "m")
        with pytest.raises(WeightsNotFoundError, match="not a commit"):
            locate(Repo(REPO, rev, ("config.json",)), "m")
    _, snap = cache
    assert pin_problem(Repo(REPO, COMMIT), "m") is None and pin_problem(Repo(str(tmp_path)), "m") is None
    repo = Repo(REPO, COMMIT, ("config.json",))
    assert locate(repo, "m") == snap and loaded(repo, snap) == f"{REPO}@{COMMIT}"
    assert loaded(Repo(str(tmp_path)), tmp_path) == str(tmp_path)
    with pytest.raises(WeightsNotFoundError, match=re.escape(f"weights {REPO}@{COMMIT} (model.m.params.weights_path): "
                                                             f"the snapshot {snap} lacks model.bin: fetch it again "
                                                             "with `make weights MODEL=m`")):
        locate(Repo(REPO, COMMIT, ("model.bin",)), "m")
