"""The Duplex Cue corpus (spec section 9; docs/formats.md, "Duplex Cue corpus"): JSON-lines
round trips, ingest of external manifests (both audio layouts, every rejection rule with the
rest still loading) and the espeak-ng generator (word times against the audio, the scripted
responses, the configured label mix, determinism)."""

from __future__ import annotations

import io
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from harness.audio.io import AudioError
from harness.audio.tts.espeak import EspeakTTS
from harness.cue.corpus import (
    CueCorpus,
    check_item,
    decode_recording,
    encode_recording,
    ingest,
    read_items,
    read_recordings,
    write_items,
    write_manifest,
    write_recordings,
)
from harness.cue.generate import (
    ESPEAK_RATE,
    CachingTTS,
    GeneratorSettings,
    generate_cue_corpus,
    intent_quotas,
    response_quotas,
)
from harness.cue.schema import INTENTS, RESPONSES, CueError, CueItem, Recording, Word
from harness.scoring.asr.text import words as tokens

RATE = 24_000


# -- generated corpora (shared: synthesis is the slow part) ------------------------------------
@pytest.fixture(scope="module")
def espeak() -> CachingTTS:
    return CachingTTS(EspeakTTS(ESPEAK_RATE))  # the generator's default, its clips shared by this module


@pytest.fixture(scope="module")
def corpus(espeak) -> CueCorpus:
    return generate_cue_corpus(9, seed=3, tts=espeak)  # 3 per intent: each response once per intent (below)


def rms_db(x: np.ndarray) -> float:
    return 20 * np.log10(np.sqrt(np.mean(np.asarray(x, np.float64) ** 2)) + 1e-12)


def span(x: np.ndarray, a: float, b: float) -> np.ndarray:
    return x[round(a * RATE):round(b * RATE)]


# -- serialisation -----------------------------------------------------------------------------
def test_items_and_recordings_round_trip_exactly(corpus):
    odd = CueItem("x-1", "x", "collaboration", (Word("Saturday", 0.1 + 0.2, 1 / 3),), 0.3, 7.123456789012345,
                  None, {"note": "ünïcode", "n": [1, 2.5]})
    items = [*corpus.items, odd]
    buf = io.StringIO()
    assert write_items(items, buf) == len(items)
    back = read_items(buf.getvalue().splitlines())
    assert back == items and [i.meta for i in back] == [i.meta for i in items]  # meta is not compared by ==
    assert back[-1].cue_words[0].start_s == 0.1 + 0.2 and back[-1].label is None
    buf = io.StringIO()
    write_recordings(corpus.recordings, buf)
    recs = read_recordings(buf.getvalue().splitlines())
    assert recs == corpus.recordings and [r.meta for r in recs] == [r.meta for r in corpus.recordings]
    assert all(isinstance(w, Word) for r in recs for w in r.a_words)


def test_recording_audio_round_trips_as_one_stereo_flac(corpus):
    x = corpus.audio[corpus.recordings[0].recording_id]
    data = encode_recording(x, RATE)
    back = decode_recording(data, RATE)
    assert back.dtype == np.float32 and np.array_equal(back, x)  # generated audio is on the 16-bit grid
    stereo, rate = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    assert rate == RATE and np.allclose(stereo[:, 0], x[0], atol=1e-4)  # channel 0 is A
    with pytest.raises(AudioError, match="at 16000 Hz"):
        decode_recording(data, 16_000)
    with pytest.raises(AudioError, match="2 channels"):
        decode_recording(sf_mono(x[0]), RATE)
    with pytest.raises(AudioError, match=r"\[2, n\]"):
        encode_recording(x[0], RATE)
    with pytest.raises(AudioError, match="NaN"):
        encode_recording(np.full((2, 4), np.nan, np.float32), RATE)


def sf_mono(x: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, x, RATE, format="FLAC", subtype="PCM_16")
    return buf.getvalue()


@pytest.mark.parametrize("line, rule, where", [
    ('{"item_id": "a", "recording_id": "r", "intent": "praise", "cue_words": [{"text": "x", "start_s": 1, '
     '"end_s": 2}], "continuation_start_s": 1, "continuation_end_s": 2}', "bad_value", "intent"),
    ('{"item_id": "a", "recording_id": "r", "intent": "backchannel", "cue_words": [], '
     '"continuation_start_s": 1, "continuation_end_s": 2}', "bad_value", "cue_words"),
    ('{"item_id": "a", "recording_id": "r", "intent": "backchannel", "cue_words": [{"text": "x", "start_s": true, '
     '"end_s": 2}], "continuation_start_s": 1, "continuation_end_s": 2}', "bad_value", "cue_words[0].start_s"),
    ('{"item_id": "a", "intent": "backchannel"}', "missing_field", "recording_id"),
    ("{not json", "json", "line 1"),
])
def test_read_items_names_the_bad_field(line, rule, where):
    with pytest.raises(CueError, match=rf"\[rule {rule}\]") as e:
        read_items([line])
    assert e.value.rule == rule and where in str(e.value)


# -- ingest --------------------------------------------------------------------------------------
DUR_S = 18.0


def talk(rate: int, spans: list[tuple[float, float]], n: int, seed: int) -> np.ndarray:
    """Noise bursts standing in for speech over ``spans`` (s), silence elsewhere."""
    x = np.zeros(n, np.float32)
    rng = np.random.default_rng(seed)
    for a, b in spans:
        x[round(a * rate):round(b * rate)] = 0.3 * rng.standard_normal(round(b * rate) - round(a * rate))
    return x


A_WORDS = [{"text": "one,", "start_s": 0.5, "end_s": 2.0}, {"text": "two", "start_s": 2.1, "end_s": 6.0}]
B_WORDS = [{"text": "right", "start_s": 5.0, "end_s": 5.5}]


def two_channels(rate: int, n: int | None = None) -> np.ndarray:
    n = n or round(DUR_S * rate)
    return np.stack([talk(rate, [(0.5, 2.0), (2.1, 6.0)], n, 1), talk(rate, [(5.0, 5.5)], n, 2)])


def write(path: Path, x: np.ndarray, rate: int, subtype: str = "PCM_16") -> str:
    sf.write(str(path), np.asarray(x).T, rate, subtype=subtype)
    return path.name


def cue(item_id: str, rid: str, **over) -> dict:
    d = {"kind": "cue", "item_id": item_id, "recording_id": rid, "intent": "backchannel", "cue_words": B_WORDS,
         "continuation_start_s": 5.0, "continuation_end_s": 6.0, "label": "continued"}
    return {**d, **over}


@pytest.fixture
def good(tmp_path) -> tuple[Path, list[dict]]:
    """A directory with two good recordings (a stereo file at 48 kHz, two mono FLACs at 24 kHz)
    and a cue on each; returns (directory, manifest lines)."""
    stereo = write(tmp_path / "s.wav", two_channels(48_000), 48_000, "PCM_24")
    x = two_channels(RATE)
    a, b = write(tmp_path / "a.flac", x[0], RATE), write(tmp_path / "b.flac", x[1], RATE)
    lines = [{"kind": "recording", "recording_id": "st", "audio": stereo, "a_words": A_WORDS, "b_words": B_WORDS},
             {"kind": "recording", "recording_id": "mo", "audio_a": a, "audio_b": b},
             cue("st-1", "st"), cue("mo-1", "mo", intent="collaboration", label=None)]
    return tmp_path, lines


def run_ingest(directory: Path, lines: list) -> CueCorpus:
    path = directory / "manifest.jsonl"
    path.write_text("".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines))
    return ingest(path)


def test_ingest_good_manifest_both_layouts(good):
    directory, lines = good
    recs, audio, items, problems = run_ingest(directory, lines)
    assert problems == []
    assert [r.recording_id for r in recs] == ["st", "mo"] and [i.item_id for i in items] == ["st-1", "mo-1"]
    for r in recs:
        assert r.sample_rate == RATE and audio[r.recording_id].shape == (2, r.n_samples)
        assert audio[r.recording_id].dtype == np.float32 and r.n_samples == round(DUR_S * RATE)
    st = audio["st"]  # 48 kHz stereo resampled: A speaks at 1 s, B at 5.2 s, each on its own row
    assert rms_db(span(st[0], 1.0, 1.5)) > -15 and rms_db(span(st[1], 1.0, 1.5)) < -80
    assert rms_db(span(st[1], 5.1, 5.4)) > -15 and rms_db(span(st[0], 7.0, 9.0)) < -80
    assert recs[0].meta["source"] == {"files": ["s.wav"], "sample_rate": 48_000}
    assert recs[0].a_words[1] == Word("two", 2.1, 6.0) and items[1].label is None


def _bad_file(directory: Path, name: str, what: str) -> str:
    if what == "garbage":
        (directory / name).write_bytes(b"RIFF not really a wave file")
    elif what == "mono":
        write(directory / name, two_channels(RATE)[0], RATE)
    elif what == "8k":
        write(directory / name, two_channels(8000), 8000)
    elif what == "16k_mono":
        write(directory / name, two_channels(16_000)[1], 16_000)
    elif what == "short_mono":
        write(directory / name, two_channels(RATE, round(15 * RATE))[1], RATE)
    elif what == "silent_b":
        x = two_channels(RATE)
        x[1] = 0
        write(directory / name, x, RATE)
    elif what == "stereo":
        write(directory / name, two_channels(RATE), RATE)
    elif what == "16001":  # coprime with 24 kHz: the sinc filter would take gigabytes
        write(directory / name, two_channels(16_001), 16_001)
    return name


# (extra manifest lines, rule, text the reason names); the good manifest's lines all still load
BAD_RECORDINGS = [
    ({"kind": "recording", "recording_id": "bad", "audio": "nope.wav"}, "missing_file", "audio: file"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("junk.wav", "garbage")}, "decode", "junk.wav"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("m.wav", "mono")}, "channels", "has 1 channel"),
    ({"kind": "recording", "recording_id": "bad", "audio_a": ("st2.wav", "stereo"), "audio_b": ("m.wav", "mono")},
     "channels", "audio_a"),
    ({"kind": "recording", "recording_id": "bad", "audio_a": ("m.wav", "mono"), "audio_b": ("l.wav", "16k_mono")},
     "mismatch", "16000 Hz"),
    ({"kind": "recording", "recording_id": "bad", "audio_a": ("m.wav", "mono"), "audio_b": ("sh.wav", "short_mono")},
     "mismatch", "360000 samples"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("n.wav", "8k")}, "sample_rate", "8000 Hz"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("o.wav", "16001")}, "sample_rate", "resampling 16001 Hz"),
    ({"kind": "recording", "recording_id": "bad", "audio": "../outside.wav"}, "outside_manifest", "'../outside.wav'"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("q.wav", "silent_b"), "audio_a": ("m.wav", "mono")},
     "audio_layout", "either"),
    ({"kind": "recording", "recording_id": "bad"}, "audio_layout", "neither"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("q.wav", "silent_b")}, "silent_channel", "channel B"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("st2.wav", "stereo"),
      "a_words": [{"text": "late", "start_s": 17.5, "end_s": 18.5}]}, "time_range", "a_words[0]"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("st2.wav", "stereo"),
      "b_words": [{"text": "x", "start_s": 2.0, "end_s": 3.0}, {"text": "y", "start_s": 2.5, "end_s": 3.5}]},
     "word_order", "b_words[1]"),
    ({"kind": "recording", "recording_id": "bad", "audio": ("st2.wav", "stereo"), "sample_rate": 16_000},
     "mismatch", "sample_rate: declared 16000"),
    ({"kind": "recording", "recording_id": "../bad", "audio": ("st2.wav", "stereo")}, "bad_id", "recording_id"),
]


@pytest.mark.parametrize("line, rule, names", BAD_RECORDINGS, ids=[f"{r}-{i}" for i, (_, r, _) in
                                                                    enumerate(BAD_RECORDINGS)])
def test_ingest_rejects_a_bad_recording_and_its_cues_and_loads_the_rest(good, line, rule, names):
    directory, lines = good
    line = {k: (_bad_file(directory, *v) if isinstance(v, tuple) else v) for k, v in line.items()}
    recs, audio, items, problems = run_ingest(directory, [*lines, line, cue("bad-1", line["recording_id"])])
    assert [r.recording_id for r in recs] == ["st", "mo"] and [i.item_id for i in items] == ["st-1", "mo-1"]
    assert set(audio) == {"st", "mo"}
    assert [(p["line"], p["rule"]) for p in problems] == [(5, rule), (6, "recording_rejected")], problems
    assert problems[0]["recording_id"] == line["recording_id"] and problems[1]["item_id"] == "bad-1"
    assert problems[0]["reason"].startswith("manifest.jsonl line 5: ") and names in problems[0]["reason"]
    assert names in problems[1]["reason"]  # the cue says why its recording went


def words(*spec):
    return [{"text": t, "start_s": a, "end_s": b} for t, a, b in spec]


BAD_CUES = [
    (cue("c", "nowhere"), "unknown_recording", "no recording 'nowhere'"),
    (cue("c", "st", intent="praise"), "bad_value", "intent: 'praise'"),
    (cue("c", "st", label="ignored"), "bad_value", "label: 'ignored'"),
    (cue("c", "st", cue_words=words(("right", 5.5, 5.0))), "time_order", "cue_words[0]"),
    (cue("c", "mo", cue_words=words(("late", 17.0, 18.5)), continuation_start_s=17.0, continuation_end_s=17.5),
     "time_range", "outside the audio"),
    (cue("c", "st", continuation_start_s=4.0), "continuation", "switch point (4.920 s)"),
    (cue("c", "st", continuation_end_s=19.0), "continuation", "end of the audio (18.000 s)"),
    (cue("c", "mo", cue_words=words(("wait", 8.5, 9.0)), continuation_start_s=8.5, continuation_end_s=9.0),
     "window", "needs 10.0 s"),
    (cue("c", "st", cue_words=words(("right", 5.0, 5.6))), "cue_not_in_b_words", "b_words"),
    ({**cue("c", "st"), "continuation_end_s": "6"}, "bad_value", "continuation_end_s: expected int or float"),
    ({k: v for k, v in cue("c", "st").items() if k != "intent"}, "missing_field", "'intent'"),
    (cue("st-1", "st"), "duplicate_id", "item id 'st-1' is on lines [3, 5]"),
    ({"kind": "take", "item_id": "c"}, "kind", "'kind' must be"),
    ("{\"kind\": \"cue\", ", "json", "invalid JSON"),
]


@pytest.mark.parametrize("line, rule, names", BAD_CUES, ids=[f"{r}-{i}" for i, (_, r, _) in enumerate(BAD_CUES)])
def test_ingest_rejects_a_bad_cue_and_loads_the_rest(good, line, rule, names):
    directory, lines = good
    recs, _, items, problems = run_ingest(directory, [*lines, line])
    dup = rule == "duplicate_id"
    assert [r.recording_id for r in recs] == ["st", "mo"]
    assert [i.item_id for i in items] == (["mo-1"] if dup else ["st-1", "mo-1"])
    assert [p["rule"] for p in problems] == [rule] * (2 if dup else 1), problems
    assert problems[-1]["line"] == 5 and names in problems[-1]["reason"]


def test_audio_outside_the_manifest_folder_needs_the_option(good, tmp_path_factory):
    directory, lines = good
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    x = two_channels(RATE)
    far = {"kind": "recording", "recording_id": "far", "audio": str(elsewhere / write(elsewhere / "f.wav", x, RATE))}
    path = directory / "manifest.jsonl"
    path.write_text("".join(json.dumps(ln) + "\n" for ln in [*lines, far]))
    assert [p["rule"] for p in ingest(path).problems] == ["outside_manifest"]  # an absolute path elsewhere
    assert ingest(path, allow_outside=True).problems == []


def test_a_manifest_saved_with_a_byte_order_mark_and_crlf_loads_like_a_clean_one(good):
    directory, lines = good
    clean = run_ingest(directory, lines)
    path = directory / "manifest.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(json.dumps(ln) + "\r\n" for ln in lines).encode())
    saved = ingest(path)
    assert saved.problems == [] and saved.recordings == clean.recordings and saved.items == clean.items


def test_ingest_an_optional_converted_a_channel(good):
    """Issue 23.4: ``audio_a_forced`` (A converted to the forcing voice, mono) becomes the
    recording's third row, forced instead of A; A's original stays row 0 (the reference); the
    written form and the stored FLAC carry it."""
    directory, lines = good
    x = two_channels(RATE)
    converted = 0.5 * x[0]
    lines[1] = {**lines[1], "audio_a_forced": write(directory / "a_conv.flac", converted, RATE)}
    recs, audio, items, problems = run_ingest(directory, lines)
    assert problems == [] and [r.forced_a for r in recs] == [False, True] and recs[1].channels == 3
    mo = audio["mo"]
    assert mo.shape == (3, round(DUR_S * RATE)) and np.allclose(mo[2], converted, atol=1e-4)
    assert np.abs(mo[0]).max() > 0.1  # row 0 is A's original, not the converted track
    assert recs[1].meta["source"]["files"] == ["a.flac", "b.flac", "a_conv.flac"]
    back = ingest(write_manifest(CueCorpus(recs, audio, items, []), directory / "written"))
    assert back.problems == [] and back.recordings == recs
    np.testing.assert_array_equal(back.audio["mo"][2], mo[2])  # (row 0's -32768 samples clip to -32767)
    assert decode_recording(encode_recording(mo, RATE), RATE).shape == (3, mo.shape[1])
    assert Recording.from_dict(recs[1].to_dict()) == recs[1]
    short = write(directory / "short.flac", converted[:-10], RATE)
    _, _, _, problems = run_ingest(directory, [{**lines[1], "audio_a_forced": short}])
    assert [p["rule"] for p in problems] == ["mismatch"] and "audio_a_forced" in problems[0]["reason"]


def test_ingest_cue_inside_and_outside_a_turn(good):
    """Issue 23.5: pauses under 0.5 s between A's words stay inside A's turn (the paper; it was
    0.8 s): a cue 0.6 s after A's last word is rejected."""
    directory, lines = good  # A's last word on "st" ends at 6.0 s
    lines[0] = {**lines[0], "b_words": words(("right", 5.0, 5.5), ("so", 6.4, 6.55), ("well", 6.6, 7.2))}
    inside = cue("in", "st", cue_words=words(("so", 6.4, 6.55)), continuation_start_s=6.4, continuation_end_s=7.0)
    after = cue("out", "st", cue_words=words(("well", 6.6, 7.2)), continuation_start_s=6.6, continuation_end_s=7.0)
    _, _, items, problems = run_ingest(directory, [lines[0], inside, after])
    assert [i.item_id for i in items] == ["in"]  # a 0.4 s pause is inside A's turn, 0.6 s is not
    assert [p["rule"] for p in problems] == ["outside_a_turn"] and "ends at 6.0 s" in problems[0]["reason"]
    assert "a pause of 0.5 s or more ends the turn" in problems[0]["reason"]
    # cue.turn_pause_s: the rule is a setting
    path = directory / "manifest.jsonl"
    assert [i.item_id for i in ingest(path, turn_pause_s=0.8).items] == ["in", "out"]


def test_ingest_a_must_be_mid_sentence_at_the_switch_point(good):
    """Issue 23.5: A's last word before the switch point must not end a sentence; a transcript
    without punctuation cannot be checked (rejected, with how to turn the rule off)."""
    directory, lines = good
    base = {**lines[0], "b_words": words(("right", 5.0, 5.5))}
    ended = {**base, "a_words": words(("one", 0.5, 2.0), ("two.", 2.1, 6.0))}
    _, _, items, problems = run_ingest(directory, [ended, lines[2]])
    assert items == [] and [p["rule"] for p in problems] == ["not_mid_sentence"]
    assert "its last word before it, 'two.' (2.1-6.0 s), ends a sentence" in problems[0]["reason"]
    bare = {**base, "a_words": words(("one", 0.5, 2.0), ("two", 2.1, 6.0))}
    _, _, items, problems = run_ingest(directory, [bare, lines[2]])
    assert items == [] and [p["rule"] for p in problems] == ["mid_sentence_unknown"]
    assert "cue.require_mid_sentence=false" in problems[0]["reason"]
    path = directory / "manifest.jsonl"
    assert [i.item_id for i in ingest(path, mid_sentence=False).items] == ["st-1"]
    mid = {**base, "a_words": words(("one.", 0.5, 2.0), ("two", 2.1, 6.0))}  # a sentence ended before: fine
    assert [i.item_id for i in run_ingest(directory, [mid, lines[2]]).items] == ["st-1"]


def test_ingest_duplicate_recording_rejects_every_line_with_it(good):
    directory, lines = good
    recs, _, items, problems = run_ingest(directory, [*lines, lines[1]])
    assert [r.recording_id for r in recs] == ["st"] and [i.item_id for i in items] == ["st-1"]
    assert [(p["line"], p["rule"]) for p in problems] == [(2, "duplicate_id"), (4, "recording_rejected"),
                                                        (5, "duplicate_id")]


# -- the generator -------------------------------------------------------------------------------
def test_response_quotas_follow_the_mix_with_every_response_present():
    mix = GeneratorSettings().mix
    assert response_quotas(8, mix["backchannel"]) == {"continued": 5, "adapted": 2, "yielded": 1}
    assert response_quotas(8, mix["interruption"]) == {"continued": 2, "adapted": 1, "yielded": 5}  # tie: order
    assert response_quotas(3, mix["collaboration"]) == {"continued": 1, "adapted": 1, "yielded": 1}
    assert response_quotas(2, mix["collaboration"]) == {"continued": 1, "adapted": 1, "yielded": 0}  # too few
    assert response_quotas(5, {"yielded": 1.0}) == {"continued": 0, "adapted": 0, "yielded": 5}
    assert intent_quotas(10) == {"backchannel": 4, "collaboration": 3, "interruption": 3}


def test_generated_labels_and_intents_follow_the_configuration(corpus):
    counts = Counter((i.intent, i.label) for i in corpus.items)
    assert counts == Counter({(i, r): 1 for i in INTENTS for r in RESPONSES})
    kinds = Counter(i.meta["kind"] for i in corpus.items if i.intent == "collaboration")
    assert kinds == {"search": 1, "correction": 1, "completion": 1}
    assert len({r.recording_id for r in corpus.recordings}) == 9 and corpus.problems == []


def test_generated_word_times_match_the_audio(corpus):
    for rec in corpus.recordings:
        x = corpus.audio[rec.recording_id]
        assert x.shape == (2, rec.n_samples) and x.dtype == np.float32 and rec.sample_rate == RATE
        for ch, ws in enumerate((rec.a_words, rec.b_words)):
            speech = np.zeros(rec.n_samples, bool)
            for w in ws:
                assert rms_db(span(x[ch], w.start_s, w.end_s)) > -35, (rec.recording_id, ch, w)
                speech[round(w.start_s * RATE):round(w.end_s * RATE)] = True
            # outside every word (with 5 ms for the resampler's ringing) only the room tone: exact times
            grown = np.convolve(speech, np.ones(241), "same") > 0
            assert rms_db(x[ch][~grown]) < -60, (rec.recording_id, ch)
            assert np.max(np.abs(x[ch][~grown])) < 0.01


def test_generated_scripts_give_each_response(corpus):
    s = GeneratorSettings()
    for rec, item in zip(corpus.recordings, corpus.items, strict=True):
        check_item(item, rec)
        x, onset, switch = corpus.audio[rec.recording_id], item.cue_onset_s, item.switch_s(s.lead_s)
        assert rms_db(span(x[0], onset, onset + 0.02)) > -30  # A audibly speaking at the cue onset
        assert any(w.start_s < onset < w.end_s for w in rec.a_words)
        assert onset - rec.a_words[0].start_s >= s.min_context_s and rec.duration_s >= switch + s.window_s
        cue_end = item.cue_words[-1].end_s
        later = [w for w in rec.a_words if w.start_s > onset]
        if item.label == "yielded":  # A stops after its word; B holds the floor
            assert later == [] and rms_db(span(x[0], item.meta["a_stop_s"] + 0.01, switch + s.window_s)) < -60
            assert rec.b_words[-1].end_s - onset >= s.min_floor_s
            continue
        assert rec.b_words[-1].end_s == cue_end  # B says only its cue
        assert later[-1].end_s - onset >= s.min_continuation_s and item.continuation_end_s == later[-1].end_s
        said = {t for w in later for t in tokens(w.text)}  # words keep their punctuation ("July.")
        cue_content = {t for w in item.cue_words for t in tokens(w.text)} - {"the", "at", "a", "to"}
        if item.label == "continued":  # no break: A talks over the cue, never with B's words
            assert later[0].start_s - item.meta["a_stop_s"] < 0.2
            if item.intent == "collaboration":
                assert not cue_content & said
        else:  # adapted: A waits for the cue's end, then takes it up
            assert later[0].start_s >= cue_end + s.response_gap_s - 1e-6
            assert rms_db(span(x[0], item.meta["a_stop_s"] + 0.01, later[0].start_s - 0.01)) < -60
            if item.intent == "collaboration":
                assert cue_content <= said


def test_generator_is_deterministic_for_a_seed(espeak):
    one = generate_cue_corpus(3, seed=11)  # its own espeak-ng calls
    two = generate_cue_corpus(3, seed=11, tts=espeak)
    assert one.items == two.items and one.recordings == two.recordings
    assert [i.meta for i in one.items] == [i.meta for i in two.items]
    assert all(np.array_equal(one.audio[k], two.audio[k]) for k in one.audio)
    other = generate_cue_corpus(3, seed=12, tts=espeak)
    assert [i.cue_words for i in other.items] != [i.cue_words for i in one.items]


def test_written_corpus_reads_back_exactly(corpus, tmp_path):
    back = ingest(write_manifest(corpus, tmp_path))
    assert back.problems == [] and back.items == corpus.items and back.recordings == corpus.recordings
    assert all(np.array_equal(back.audio[k], corpus.audio[k]) for k in corpus.audio)  # on the 16-bit grid


def test_generator_settings_are_checked():
    with pytest.raises(ValueError, match="distinct"):
        generate_cue_corpus(3, 0, settings=GeneratorSettings(voices=("en-us+m1", "en-us+m1")))
    with pytest.raises(ValueError, match="mix"):
        generate_cue_corpus(3, 0, settings=GeneratorSettings(mix={"backchannel": {"continued": 1}}))
    with pytest.raises(ValueError, match="n_items"):
        generate_cue_corpus(0, 0)


def test_recording_from_dict_rejects_bad_types():
    with pytest.raises(CueError, match="n_samples"):
        Recording.from_dict({"recording_id": "r", "sample_rate": 24_000, "n_samples": "many"})
