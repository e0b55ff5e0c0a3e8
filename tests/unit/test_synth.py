"""The synth stage: resumable, parallel, failures per clip, Qwen3-TTS through the stage (a stand-in
``qwen_tts`` package written here: the real one and its weights are never needed)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from harness.audio.io import decode
from harness.audio.tts import SynthesisError
from harness.audio.tts.espeak import EspeakTTS
from harness.products.scenes import SceneSet
from harness.stages import run_stage
from harness.store.base import get_json
from tests.fixtures.synth_runs import qwen3_scenes, synth_config, synth_outputs, with_scenes, write_qwen_tts


@pytest.fixture
def spoken(monkeypatch):
    """Counts (and optionally breaks) espeak-ng calls: ``spoken.texts`` lists every text spoken."""

    class Spoken:
        texts: ClassVar[list[str]] = []
        kill_at: int | None = None  # KeyboardInterrupt on this call (1-based), as a killed job
        refuse: str | None = None  # SynthesisError for this text

    real = EspeakTTS.synthesize

    def synthesize(self, text, voice):
        Spoken.texts.append(text)
        if len(Spoken.texts) == Spoken.kill_at:
            raise KeyboardInterrupt
        if text == Spoken.refuse:
            raise SynthesisError("espeak-ng failed for this text (test)")
        return real(self, text, voice)

    monkeypatch.setattr(EspeakTTS, "synthesize", synthesize)
    Spoken.texts = []
    return Spoken


def test_a_killed_run_resumes_making_only_the_missing_clips(tmp_path, spoken):
    cfg, store, plan = with_scenes(tmp_path / "a", batch=4)
    lay = plan.layout
    spoken.kill_at = 7  # batch 1 (4 clips) is complete and recorded; batch 2 has stored 2 clips, no record
    with pytest.raises(KeyboardInterrupt):
        run_stage("synth", cfg, store)
    assert not store.exists(lay.marker(plan.synth)) and not store.exists(lay.file(plan.synth, "index.json"))
    first = list(spoken.texts[:6])
    stored = sorted(store.list(lay.file(plan.synth, "clips")))
    assert len(stored) == 6 and len(list(store.list(lay.file(plan.synth, "batches")))) == 1
    recorded = get_json(store, next(store.list(lay.file(plan.synth, "batches"))))["lengths"]
    unrecorded = [k for k in stored if k.rsplit("/", 1)[1].removesuffix(".flac") not in recorded]
    assert len(recorded) == 4 and len(unrecorded) == 2
    store.put(unrecorded[0], store.get(unrecorded[0])[:200])  # cut short, as a copy that did not finish leaves it

    spoken.texts, spoken.kill_at = [], None
    run_stage("synth", cfg, store)
    index = get_json(store, lay.file(plan.synth, "index.json"))
    n_distinct = len({t["clip"] for c in index["conversations"].values() for t in c["turns"]} |
                     {index["preamble"]["clip"]})
    # made now: everything but the 4 recorded clips and the 1 stored, unrecorded clip that decodes
    assert len(spoken.texts) == n_distinct - 5
    assert set(spoken.texts).isdisjoint(first[:4])
    assert len(set(spoken.texts) & set(first[4:6])) == 1  # the cut clip was made again, its neighbour not

    # the resumed outputs are exactly an uninterrupted run's
    cfg2, store2, _ = with_scenes(tmp_path / "b", batch=4)
    run_stage("synth", cfg2, store2)
    assert synth_outputs(store, plan) == synth_outputs(store2, plan)
    for key in store.list(lay.file(plan.synth, "clips")):
        assert len(decode(store.get(key), 24_000)[0]) > 0
    spoken.texts = []
    run_stage("synth", cfg, store)  # complete: skipped
    assert spoken.texts == []


def test_a_failing_clip_errors_only_the_conversations_that_need_it(tmp_path, spoken):
    cfg, store, plan = with_scenes(tmp_path, n_pairs=2)
    scenes = {s.scene_id: s for s in SceneSet.read(store, plan.layout, plan.scenes).scenes}
    counts: dict[str, int] = {}
    for s in scenes.values():
        for t in {t.text for t in s.turns}:
            counts[t] = counts.get(t, 0) + 1
    victim = next(sid for sid in sorted(scenes) if any(counts[t.text] == 1 for t in scenes[sid].turns))
    k, turn = next((i, t) for i, t in enumerate(scenes[victim].turns) if counts[t.text] == 1)
    spoken.refuse = turn.text
    run_stage("synth", cfg, store)
    lay = plan.layout
    index = get_json(store, lay.file(plan.synth, "index.json"))
    assert set(index["errors"]) == {victim}
    assert index["errors"][victim] == (f"synthesis failed: turn {k} (speaker {turn.speaker}, voice "
                                       f"{cfg.tts.voices[turn.speaker]!r}): SynthesisError: espeak-ng failed for "
                                       "this text (test)")
    [(cid, rec)] = index["failed_clips"].items()
    assert rec["text"] == turn.text and "failed for this text" in rec["reason"]
    assert not store.exists(lay.clip(plan.synth, cid))
    assert set(index["conversations"]) == set(scenes) - {victim}
    for sid, conv in index["conversations"].items():
        assert len(conv["turns"]) == len(scenes[sid].turns)
    marker = get_json(store, lay.marker(plan.synth))
    assert (marker["errors"], marker["failed_clips"]) == (1, 1)


def test_a_preamble_espeak_cannot_speak_stops_the_stage(tmp_path):
    cfg, store, plan = with_scenes(tmp_path, narrator="nonexistentvoice")
    with pytest.raises(SynthesisError, match=r"duty preamble.*nonexistentvoice"):
        run_stage("synth", cfg, store)
    assert not store.exists(plan.layout.marker(plan.synth))


@pytest.fixture
def fake_qwen_tts(tmp_path_factory, monkeypatch) -> Iterator[Path]:
    """The stand-in package's folder, importable here while the test runs; the module it imported
    leaves ``sys.modules`` with it (a later test would find the package "installed")."""
    pkg = write_qwen_tts(tmp_path_factory.mktemp("fake_pkg"))
    monkeypatch.syspath_prepend(str(pkg))
    monkeypatch.delitem(sys.modules, "qwen_tts", raising=False)
    yield pkg
    sys.modules.pop("qwen_tts", None)


def test_qwen3_through_the_stage(tmp_path, fake_qwen_tts):
    weights = tmp_path / "weights"
    weights.mkdir()
    cfg, store, plan = qwen3_scenes(tmp_path / "store", weights, batch=5)
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    assert index["errors"] == {} and index["failed_clips"] == {} and len(index["conversations"]) == 4
    loads = [json.loads(x) for x in (weights / "loads.jsonl").read_text().splitlines()]
    assert loads == [{"pid": os.getpid(), "device": "cpu", "dtype": "torch.bfloat16"}]  # loaded once
    # 12 kHz stand-in output, trimmed to 10 ms margins, at 24 kHz
    for s in SceneSet.read(store, plan.layout, plan.scenes).scenes:
        for t, c in zip(s.turns, index["conversations"][s.scene_id]["turns"], strict=True):
            assert abs(c["n"] - 2 * (int(0.05 * 12_000 * len(t.text)) + 240)) <= 4
            assert len(decode(store.get(plan.layout.clip(plan.synth, c["clip"])), 24_000)[0]) == c["n"]
    # a speaker the model does not know fails its clips (the batch is retried clip by clip), not the others
    cfg, store, plan = qwen3_scenes(tmp_path / "store2", weights, batch=5,
                              voices={"A": "ryan", "B": "aiden", "C": "eric", "D": "nobody"})
    run_stage("synth", cfg, store)
    index = get_json(store, plan.layout.file(plan.synth, "index.json"))
    four = {s.scene_id for s in SceneSet.read(store, plan.layout, plan.scenes).scenes if "D" in s.speakers}
    assert four and set(index["errors"]) == four and set(index["conversations"]).isdisjoint(four)
    assert all("Unsupported speakers" in e and "speaker D" in e for e in index["errors"].values())
    assert {r["voice"] for r in index["failed_clips"].values()} == {"nobody"}


def test_tts_settings_are_checked():
    with pytest.raises(Exception, match="engine 'festival'"):
        synth_config(Path("/tmp"), engine="festival")
    with pytest.raises(Exception, match="batch"):
        synth_config(Path("/tmp"), batch=0)
    from harness.audio.tts import build_tts

    with pytest.raises(ValueError, match="qwen3 engine takes"):
        build_tts(synth_config(Path("/tmp"), engine="qwen3", params={"speed": 2}).tts, 24_000)
    qwen = synth_config(Path("/tmp"), engine="qwen3", params={"weights": "/w", "seed": 1})
    assert qwen.tts.audio_settings()["params"] == {"seed": 1}
