"""Every stage that fans out over the runtime pool (synth, vad re-detection, score, cue-score)
survives an actor killed mid-batch: the batch runs again on a fresh actor and the stage writes
exactly what an undisturbed run writes. Real local Ray (2 CPUs, started here), real stage
workers; the one change is a subclass of the stage's worker whose first call anywhere kills its
own process with SIGKILL (a flag file, created atomically, says it has happened), swapped in for
the worker the stage names. The undisturbed run goes first so the second one reads the same
ASR cache (a pocketsphinx decoder's words depend on what its process transcribed before).
cue-score on an actor, undisturbed, writes what it writes in this process."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from pathlib import Path

import pytest
import ray

from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.pool import BatchesFailed
from harness.stages import cue_score, run_stage, score, synth, vad
from harness.store.base import LocalStore
from tests.fixtures.runs import babble_shard, tiny_config
from tests.fixtures.synth_runs import with_scenes


@pytest.fixture(scope="module")
def local_ray():
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    tmp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay under 108 bytes
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tmp, logging_level="WARNING")
    yield
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


def dies(base: type, method: str, flag: Path, always: bool = False) -> type:
    """``base`` whose ``method`` kills its process on the first call of all (``always``: on every
    call); a class made here, so Ray ships it by value to its actors."""
    def call(self, *args):
        try:
            os.close(os.open(flag, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            first = True
        except FileExistsError:
            first = False
        if first or always:
            os.kill(os.getpid(), signal.SIGKILL)
        return getattr(base, method)(self, *args)

    return type(f"Dying{base.__name__}", (base,), {method: call})


def _tree(root: Path, prefix: str) -> dict[str, bytes]:
    """Every object under ``prefix`` of a local store, by key."""
    base = root / prefix
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def _again(root: Path, prefix: str) -> dict[str, bytes]:
    """The stage's outputs, then removed so that the stage runs again."""
    out = _tree(root, prefix)
    shutil.rmtree(root / prefix)
    return out


def _cached_the_same(pooled: dict[str, bytes], undisturbed: dict[str, bytes], rows: str, hits: str,
                     misses: str) -> None:
    """The pooled run wrote the undisturbed run's ``rows`` object byte for byte, and its marker
    counts the same, every ASR and judge (or paid labeller) result now a cache hit: the killed
    batch's too."""
    assert sorted(pooled) == sorted(undisturbed) == sorted([rows, "_SUCCESS.json"])
    assert pooled[rows] == undisturbed[rows]
    now, before = json.loads(pooled["_SUCCESS.json"]), json.loads(undisturbed["_SUCCESS.json"])
    assert before["asr_calls"] > 0
    assert (now["asr_calls"], now[hits], now[misses]) == (0, before[hits] + before[misses], 0)
    counters = {"asr_calls", hits, misses, "usd_saved"}
    assert {k: v for k, v in now.items() if k not in counters} == {k: v for k, v in before.items() if k not in counters}


def _with(cfg: RunConfig, **groups) -> RunConfig:
    """``cfg`` with some groups' settings replaced (where it runs: the stages' prefixes stay, so
    a run under another prefix would leave the compared one missing)."""
    d = cfg.to_dict()
    for group, settings in groups.items():
        d[group] = {**d[group], **settings}
    return RunConfig.from_dict(d)


def test_synth_pool(local_ray, tmp_path, monkeypatch):
    root = tmp_path / "store"
    cfg, store, plan = with_scenes(root)
    run_stage("synth", cfg, store)
    undisturbed = _again(root, plan.synth)
    flag = tmp_path / "killed"
    monkeypatch.setattr(synth, "ClipSynthesizer", dies(synth.ClipSynthesizer, "run", flag))
    run_stage("synth", _with(cfg, tts={"actors": 2, "batch": 4}), store)
    assert flag.exists()
    pooled = _tree(root, plan.synth)
    batches = [k for k in pooled if k.startswith("batches/")]  # the batches' length records: their own layout
    assert len(batches) == 4 and len([k for k in undisturbed if k.startswith("batches/")]) == 1
    assert {k: v for k, v in pooled.items() if k not in batches} == \
        {k: v for k, v in undisturbed.items() if not k.startswith("batches/")}  # the clips, index and marker


@pytest.fixture(scope="module")
def shard(tmp_path_factory):
    """One babble shard for the vad and score pools: each writes under prefixes of its own (a
    re-detecting vad version; the default vad, and score)."""
    root = tmp_path_factory.mktemp("pools") / "store"
    return root, babble_shard(root, "pools")


def test_vad_redetection_pool(local_ray, shard, tmp_path, monkeypatch):
    root, (cfg, store, _, _) = shard
    cfg = _with(cfg, vad={"model": "silero-vad-jit-offline", "batch": 1})  # Silero again, one conversation a batch
    assert not vad.reuses_online_detector(cfg)
    prefix = RunPlan.from_config(cfg).vad["babble"]
    run_stage("vad", cfg, store)
    undisturbed = _again(root, prefix)
    flag = tmp_path / "killed"
    monkeypatch.setattr(vad, "OutputDetector", dies(vad.OutputDetector, "detect", flag))
    run_stage("vad", cfg, store)
    assert flag.exists()
    assert _tree(root, prefix) == undisturbed


def test_score_pool(local_ray, shard, tmp_path, monkeypatch):
    root, (cfg, store, plan, _) = shard
    run_stage("vad", cfg, store)
    cfg = _with(cfg, score={"actors": 0, "batch": 1})
    prefix = plan.score["babble"]
    run_stage("score", cfg, store)
    undisturbed = _again(root, prefix)
    pooled = _with(cfg, score={"actors": 2}, cluster={"batch_attempts": 2})
    worker = score.ConversationScoring
    # an actor that dies on every attempt: the stage fails naming itself and the batch, and writes nothing
    monkeypatch.setattr(score, "ConversationScoring", dies(worker, "score", tmp_path / "x", always=True))
    with pytest.raises(BatchesFailed, match=r"^score: 2 of 2 batch\(es\) failed, the others' results are kept: "
                                            r"batch 1 of 2 \(model 'babble', 1 item\(s\) from "
                                            r"p00000-(?:explicit|implicit)\) "
                                            r"failed after 2 attempt\(s\): ActorDiedError: The actor died"):
        run_stage("score", pooled, store)
    assert not (root / prefix).exists()
    # killed once: retried, and the same windows (verdicts included) and marker as in this process
    flag = tmp_path / "killed"
    monkeypatch.setattr(score, "ConversationScoring", dies(worker, "score", flag))
    run_stage("score", pooled, store)
    assert flag.exists()
    _cached_the_same(_tree(root, prefix), undisturbed, "windows.json", hits="judge_hits", misses="judge_misses")


def test_cue_score_pool(local_ray, tmp_path, monkeypatch):
    from harness.cue.generate import generate_cue_corpus
    from harness.cue.plan import CuePlan
    from tests.fixtures.cue import write_continuations, write_corpus

    root = tmp_path / "store"
    cfg = tiny_config(root, "cue", {"replay": {"target": "replay"}}, score={"batch": 1, "actors": 0})
    store, plan = LocalStore(root), CuePlan.from_config(cfg)
    corpus = generate_cue_corpus(2, seed=1)
    write_corpus(store, plan, corpus)
    write_continuations(store, plan, cfg, "replay", corpus,
                         lambda it, a, start, switch, end: a[round(start * 24_000): round(end * 24_000)])
    run_stage("cue-score", cfg, store)
    undisturbed = _again(root, plan.score["replay"])
    flag = tmp_path / "killed"
    monkeypatch.setattr(cue_score, "CueScoring", dies(cue_score.CueScoring, "score", flag))
    run_stage("cue-score", _with(cfg, score={"actors": 2}), store)
    assert flag.exists()
    _cached_the_same(_tree(root, plan.score["replay"]), undisturbed, "rows.json", hits="label_hits",
                     misses="label_misses")


def test_cue_score_on_an_actor_writes_what_the_calling_process_writes(local_ray, tmp_path):
    """cue-score on a Ray actor (batches of one item, merged back into corpus order) gives the same
    rows.json and marker as ``score.actors=0`` in this process; the real offline stack (espeak-ng
    speech, pocketsphinx, Silero), as an actor cannot see monkeypatches. One actor: a pocketsphinx
    decoder's live CMN carries from one utterance to the next, so its words depend on the order
    a process transcribes in (two actors split that history)."""
    from harness.cue.generate import generate_cue_corpus
    from harness.cue.plan import CuePlan
    from harness.store.base import get_json
    from harness.store.settings import open_store
    from tests.fixtures.cue import write_continuations, write_corpus

    corpus = generate_cue_corpus(2, seed=1)
    out = {}
    for actors in (0, 1):
        root = tmp_path / f"actors-{actors}"
        cfg = tiny_config(root, "cue", {"replay": {"target": "replay"}, "yield_now": {"target": "yield_now"}},
                          score={"batch": 1, "actors": actors})  # on this module's Ray
        store, plan = open_store(cfg.store), CuePlan.from_config(cfg)
        write_corpus(store, plan, corpus)
        for name, cut in (("replay", False), ("yield_now", True)):
            def make(it, a, start, switch, end, cut=cut):
                y = a[round(start * 24_000): round(end * 24_000)].copy()
                if cut:  # yields 0.3 s after the cue onset (silent from the switch would be excluded: issue 23.1)
                    y[round((switch - start + 0.38) * 24_000):] = 0
                return y

            write_continuations(store, plan, cfg, name, corpus, make)
        run_stage("cue-score", cfg, store)
        out[actors] = {m: (get_json(store, plan.layout.file(plan.score[m], "rows.json")),
                           get_json(store, plan.layout.marker(plan.score[m]))) for m in ("replay", "yield_now")}
    assert out[1] == out[0]
    for m in ("replay", "yield_now"):
        rows, mk = out[0][m]
        assert [r["item_id"] for r in rows] == [it.item_id for it in corpus.items]
        assert mk["items"] == mk["eligible"] == 2 and mk["asr_calls"] > 0
    assert [r["model_label"] for r in out[0]["yield_now"][0]] == ["yielded", "yielded"]
