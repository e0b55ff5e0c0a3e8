"""From downloaded weights to a loaded model, per evaluated model, without the weights (issue 21).

For each of the six models a fake snapshot of its repositories, in the upstream repository's
layout (the file names the upstream code at the pinned commit opens: tests/fixtures/tiny/<model>.py),
is written into a temporary Hugging Face cache (``HF_HUB_CACHE``, looked up offline by the real
huggingface_hub). Moshi's holds tiny real weights (safetensors of a tiny Mimi and LM) that the
real ``moshi`` loaders read; the others' are read by their stand-ins (tests/fixtures/standins/),
whose upstream code cannot be installed here. Checked: the job's preflight accepts the snapshot;
a missing file, a wrong revision, an unpinned revision or a missing second repository is refused
with one message naming the repository, the revision and ``make weights MODEL=<m>``; the adapter's
loader reads it and records ``repo@<commit>`` in ``ModelInfo.weights``; and the real pipeline
without weights exits 2 before any stage, naming what to fetch.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import pytest

from harness.models.registry import build_model, model_config
from harness.runtime.preflight import problems
from harness.store.base import LocalStore
from tests.fixtures import hub
from tests.fixtures.runs import tiny_config
from tests.fixtures.tiny import flm_audio, freeze_omni, minicpm_o, personaplex, voila

REPO = Path(__file__).resolve().parents[2]
C1, C2 = "a1" * 20, "b2" * 20  # the snapshots' commits
OTHER = "f" * 40  # a commit the cache does not hold


@dataclass
class Case:
    """A model's repositories as ``(repo id, commit, files)`` with the params that select them
    (``revision`` keys), the stand-in that makes its stack importable, and extra params (voice files)."""

    name: str
    snapshots: list[tuple[str, str, dict]]
    revisions: dict[str, str]  # param -> commit
    upstream: Callable
    params: dict


def _tiny_moshi_files() -> dict[str, bytes]:
    """kyutai/moshiko-pytorch-bf16's two checkpoint files, holding a tiny Mimi and LM of the real moshi
    classes (harness/models/moshi.py TINY_MIMI, TINY_LM), and its text tokenizer's file name."""
    import torch
    from moshi.models import loaders
    from safetensors.torch import save

    from harness.models.moshi import TINY_LM, TINY_MIMI

    torch.manual_seed(1)
    mimi = loaders.get_mimi(None, mimi_config=TINY_MIMI)
    lm = loaders.get_moshi_lm(None, lm_kwargs=TINY_LM, dtype=torch.float32)
    state = {name: {k: v.contiguous().clone() for k, v in m.state_dict().items()} for name, m in
             (("mimi", mimi), ("lm", lm))}
    return {"model.safetensors": save(state["lm"]), "tokenizer-e351c8d8-checkpoint125.safetensors":
            save(state["mimi"]), "tokenizer_spm_32k_3.model": b""}


@contextmanager
def _moshi_upstream(monkeypatch) -> Iterator[None]:
    """The real moshi package, its default (7B) configs narrowed to the tiny ones, so that its loaders
    build the tiny architecture the snapshot's weights are for (moshiko has no config.json)."""
    pytest.importorskip("moshi", reason="Kyutai's moshi is not installed (requirements-nodeps.txt)")
    from moshi.models import loaders

    from harness.models.moshi import TINY_LM, TINY_MIMI

    monkeypatch.setenv("NO_TORCH_COMPILE", "1")
    monkeypatch.setattr(loaders, "_lm_kwargs", TINY_LM)
    monkeypatch.setattr(loaders, "_mimi_config", TINY_MIMI)
    yield


def case(name: str, tmp: Path) -> Case:
    if name == "moshi":
        return Case(name, [("kyutai/moshiko-pytorch-bf16", C1, _tiny_moshi_files())], {"revision": C1},
                    _moshi_upstream, {"dtype": "float32", "max_batch": 2})
    if name == "personaplex":
        spm = personaplex.tokenizer(tmp)
        return Case(name, [("nvidia/personaplex-7b-v1", C1, personaplex.files(spm, voices="tgz"))],
                    {"revision": C1}, personaplex.upstream, {})
    if name == "minicpm_o":
        return Case(name, [("openbmb/MiniCPM-o-4_5", C1, minicpm_o.files())], {"revision": C1}, minicpm_o.upstream,
                    {"ref_audio": str(minicpm_o.voice(tmp))})
    if name == "flm_audio":
        return Case(name, [("CofeAI/FLM-Audio", C1, flm_audio.files())], {"revision": C1}, flm_audio.upstream, {})
    if name == "voila":
        return Case(name, [("maitrix-org/Voila-autonomous-preview", C1, voila.llm_files()),
                           ("maitrix-org/Voila-Tokenizer", C2, voila.codec_files())],
                    {"revision": C1, "codec_revision": C2}, voila.upstream, {"voice_file": str(voila.voices(tmp))})
    assert name == "freeze_omni"
    return Case(name, [(freeze_omni.REPO, C1, freeze_omni.checkpoint_files()),
                       (freeze_omni.LLM_REPO, C2, freeze_omni.llm_files())],
                {"revision": C1, "llm_revision": C2}, freeze_omni.upstream, {})


MODELS = ("moshi", "personaplex", "minicpm_o", "flm_audio", "voila", "freeze_omni")


@pytest.fixture(params=MODELS)
def model(request, tmp_path, monkeypatch) -> Iterator[tuple[Case, Path]]:
    """A model's case with its snapshots in a fresh hub cache and its stand-in importable: ``(case, cache)``."""
    c = case(request.param, tmp_path)
    cache = hub.use_cache(monkeypatch, tmp_path / "hub")
    for repo, commit, files in c.snapshots:
        hub.put_snapshot(cache, repo, commit, files)
    with c.upstream(monkeypatch):
        yield c, cache


def params(c: Case, **over) -> dict:
    """The model's shipped config params with the case's revisions and extras, then ``over``."""
    return {**model_config(c.name)["params"], **c.revisions, **c.params, **over}


def found(c: Case, tmp: Path, **over) -> list[str]:
    conf = {**model_config(c.name), "params": params(c, **over), "num_gpus": 0}
    run = tiny_config(tmp / "store", "r", {c.name: conf}, cluster={"num_cpus": 4, "num_gpus": 0})
    return problems(run, LocalStore(run.store.root), ["infer"])


def test_the_preflight_accepts_the_snapshot(model, tmp_path):
    c, _ = model
    assert found(c, tmp_path) == []


def test_the_loader_reads_the_snapshot_and_records_what_it_read(model):
    c, _ = model
    m = build_model(c.name, params(c))
    m.load("cpu")
    read = "+".join(f"{repo}@{commit}" for repo, commit, _ in c.snapshots)
    assert m.info.weights.split(" ")[0] == read  # personaplex adds its decoding settings after a space
    if c.name == "moshi":  # the real loaders read the tiny weights: the model holds them
        from safetensors.torch import load

        saved = load(c.snapshots[0][2]["model.safetensors"])
        assert all(v.equal(saved[k]) for k, v in m.lm.state_dict().items() if k in saved) and len(saved) > 10


def test_a_missing_file_is_refused_naming_it_and_the_fetch_command(model, tmp_path):
    c, cache = model
    repo, commit, files = c.snapshots[0]
    snap = cache / f"models--{repo.replace('/', '--')}" / "snapshots" / commit
    gone = next(f for f in files if f in build_model(c.name, params(c)).requirements().repos[0].files)
    (snap / gone).unlink()
    [problem] = found(c, tmp_path)
    assert problem.startswith(f"model {c.name!r}: ") and f"{repo}@{commit}" in problem
    assert f"lacks {gone}: fetch it again with `make weights MODEL={c.name}`" in problem


def test_a_revision_the_cache_does_not_hold_is_refused_with_the_fetch_command(model, tmp_path):
    c, cache = model
    key = next(iter(c.revisions))
    [problem] = found(c, tmp_path, **{key: OTHER})
    repo = c.snapshots[0][0]
    assert f"{repo}@{OTHER}" in problem and "are not in the Hugging Face cache" in problem
    assert f"in the local Hugging Face cache {cache}" in problem and f"`make weights MODEL={c.name}`" in problem


@pytest.mark.parametrize("name", ["voila", "freeze_omni"])
def test_a_missing_second_repository_is_refused(name, tmp_path, monkeypatch):
    c = case(name, tmp_path)
    cache = hub.use_cache(monkeypatch, tmp_path / "hub")
    (repo, commit, files), (second, commit2, _) = c.snapshots
    hub.put_snapshot(cache, repo, commit, files)
    with c.upstream(monkeypatch):
        [problem] = found(c, tmp_path)
    assert f"{second}@{commit2}" in problem and f"`make weights MODEL={name}`" in problem


@pytest.mark.parametrize("revision", [None, "main"])
def test_an_unpinned_revision_is_refused_saying_how_to_find_the_commit(revision, tmp_path, monkeypatch):
    c = case("flm_audio", tmp_path)
    hub.put_snapshot(hub.use_cache(monkeypatch, tmp_path / "hub"), *c.snapshots[0])
    with c.upstream(monkeypatch):
        [problem] = found(c, tmp_path, revision=revision)
    what = "no revision" if revision is None else "revision 'main'"
    assert problem.startswith(f"model 'flm_audio': weights CofeAI/FLM-Audio (model.flm_audio.params.weights_path) has "
                              f"{what}, not a commit: pin the 40-hex commit you evaluate "
                              "(model.flm_audio.params.revision=<commit>, conf/model/flm_audio.yaml)")
    assert "h.model_info('CofeAI/FLM-Audio').sha" in problem
    with c.upstream(monkeypatch), pytest.raises(FileNotFoundError, match="not a commit"):  # and so does the loader
        build_model("flm_audio", params(c, revision=revision)).load("cpu")


def test_personaplex_under_kyutais_moshi_is_named_as_shadowed(tmp_path, monkeypatch):
    """In the harness environment ``moshi`` is Kyutai's: PersonaPlex's stack check says so precisely."""
    pytest.importorskip("moshi", reason="Kyutai's moshi is not installed (requirements-nodeps.txt)")
    c = case("personaplex", tmp_path)
    hub.put_snapshot(hub.use_cache(monkeypatch, tmp_path / "hub"), *c.snapshots[0])
    [problem] = found(c, tmp_path)
    assert problem.startswith("model 'personaplex': its stack does not import here: `moshi.offline`: "
                              "ModuleNotFoundError: No module named 'moshi.offline' (`moshi` imports here from ")
    assert "moshi 0.2.13)" in problem and "Kyutai's `moshi` (the harness environment installs it" in problem
    assert problem.endswith("it runs in image duplex-mpe-personaplex: run the job there, or in the environment "
                            "`make model-env MODEL=personaplex` makes (images/README.md)")


def test_a_folder_in_the_repositorys_layout_needs_no_cache(tmp_path, monkeypatch):
    """``weights_path`` a folder laid out as the repository is (Freeze-Omni's holds ``checkpoints/``,
    as the README's "move checkpoints into the repo" and the Hub snapshot lay it out)."""
    hub.use_cache(monkeypatch, tmp_path / "empty-hub")
    with freeze_omni.upstream(monkeypatch) as calls:
        folders = freeze_omni.weights(tmp_path)
        c = Case("freeze_omni", [], {}, nullcontext, folders)
        assert found(c, tmp_path) == []
        m = build_model("freeze_omni", params(c))
        m.load("cpu")
        assert calls["args"]["model_path"] == f"{folders['weights_path']}/checkpoints"
        assert m.info.weights == f"{folders['weights_path']}+{folders['llm_path']}"
        shutil.rmtree(Path(folders["weights_path"]) / "checkpoints" / "codec")
        [problem] = found(c, tmp_path)
        assert "lacks checkpoints/codec/model.json, checkpoints/codec/final.pt: give a folder laid out" in problem
