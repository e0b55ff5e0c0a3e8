"""ASR: the ARPA writer (pure), text normalisation, real pocketsphinx on real espeak-ng speech, and
the Qwen3-ASR backend with a recording stand-in for ``qwen_asr`` (context, audio, word times)."""

from __future__ import annotations

import importlib.util
import math
import re
import sys
import tempfile
import types
from types import SimpleNamespace

import numpy as np
import pocketsphinx
import pytest
import torch

from harness.audio.preamble import DUTY_TEXT
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.scoring.asr import ASR, Transcript, build_asr
from harness.scoring.asr.arpa import BOS, EOS, arpa_text, estimate, format_arpa
from harness.scoring.asr.text import edit_distance, normalize, number_words, sentences, words

SR = 24_000
SCENE = (  # a small scene: what the scoring stage passes as `vocabulary`
    "Did anyone book the dentist for Dad?",
    "Yes, Maya did. The dentist appointment is on Thursday at three.",
    "Lunch at the food truck was nine dollars each.",
    "Hey Aria, when is the dentist appointment?",
    "Can you check the calendar for us, Aria?",
    "Yes of course.",
    "Thursday at three",
    DUTY_TEXT,
)
ANSWERS = ("thursday at three", "nine dollars", "yes of course", "the dentist appointment is on thursday at three",
           "okay", "sure")
# Measured 0.0 for both voices with espeak-ng 1.51 (bench/asr_wer.py: ~0.20 over 120 held-out utterances
# with one scene's vocabulary); the bound leaves room for other espeak-ng builds.
WER_BOUND = 0.25



@pytest.fixture(scope="module")
def asr() -> ASR:
    return build_asr("pocketsphinx")


# -- ARPA writer (pure) ------------------------------------------------------------------

SENTS = [["yes", "of", "course"], ["nine", "dollars"], ["thursday", "at", "three"], ["yes"], ["at", "three"]]


def _parse_arpa(text: str) -> tuple[dict[int, int], dict[int, list[list[str]]]]:
    header: dict[int, int] = {}
    grams: dict[int, list[list[str]]] = {}
    section = None
    lines = text.splitlines()
    assert lines[0] == "\\data\\" and lines[-1] == "\\end\\"
    for line in lines[1:-1]:
        if m := re.fullmatch(r"ngram (\d+)=(\d+)", line):
            header[int(m[1])] = int(m[2])
        elif m := re.fullmatch(r"\\(\d+)-grams:", line):
            section = int(m[1])
            grams[section] = []
        elif line.strip() and section is not None:
            grams[section].append(line.split("\t"))
    return header, grams


def test_arpa_header_counts_match_and_values_are_log10_probabilities():
    header, grams = _parse_arpa(arpa_text(SENTS))
    assert set(header) == set(grams) == {1, 2}
    for order in (1, 2):
        assert header[order] == len(grams[order]) > 0
        for row in grams[order]:
            assert len(row[1].split()) == order
            assert float(row[0]) <= 0.0
    unigrams = {row[1]: row for row in grams[1]}
    assert set(unigrams) == {BOS, EOS, *(w for s in SENTS for w in s)}
    assert float(unigrams[BOS][0]) == -99.0  # never predicted
    assert len(unigrams[EOS]) == 2  # </s> is never a history: no back-off weight
    bigrams = {tuple(row[1].split()) for row in grams[2]}
    assert (BOS, "yes") in bigrams and ("three", EOS) in bigrams and ("course", "nine") not in bigrams


def test_every_conditional_distribution_sums_to_one():
    lm = estimate(SENTS, discount=0.3, uniform=0.2)
    vocab = [w for w in lm.unigrams if w != BOS]
    assert math.isclose(sum(10 ** lm.unigrams[w][0] for w in vocab), 1.0, rel_tol=1e-9)
    for h in lm.unigrams:
        if h != EOS:
            assert math.isclose(sum(lm.prob(w, h) for w in vocab), 1.0, rel_tol=1e-9), h
    assert lm.prob("of", "yes") > lm.prob("dollars", "yes") > 0  # seen beats backed-off


def test_arpa_is_read_by_pocketsphinx_with_the_same_probabilities():
    lm = estimate(SENTS)
    with tempfile.NamedTemporaryFile("w", suffix=".arpa") as fh:
        fh.write(format_arpa(lm))
        fh.flush()
        config = pocketsphinx.Config()
        config["loglevel"] = "FATAL"
        logmath = pocketsphinx.LogMath()
        model = pocketsphinx.NGramModel(config, logmath, fh.name)
    assert model.size() == 2
    for word, history in [("of", "yes"), ("dollars", "yes"), (EOS, "three"), ("nine", BOS)]:
        assert math.isclose(logmath.exp(model.prob([word, history])), lm.prob(word, history), rel_tol=1e-3)


def test_estimate_rejects_bad_input():
    with pytest.raises(ValueError, match="no non-empty"):
        estimate([[], []])
    with pytest.raises(ValueError, match="discount"):
        estimate(SENTS, discount=1.0)
    with pytest.raises(ValueError, match="invalid LM token"):
        estimate([["a", "</s>"]])


# -- text --------------------------------------------------------------------------------

def test_text_normalisation():
    assert number_words(212) == ["two", "hundred", "twelve"]
    assert number_words(50_000) == ["fifty", "thousand"]
    assert words("It’s $1,250 -- twenty-five, at 3:30!") == [
        "it's", "one", "thousand", "two", "hundred", "fifty", "dollars", "twenty", "five", "at", "three", "thirty"]
    assert normalize("  Yes,  OF course. ") == "yes of course"
    assert normalize("It's $9, 50% off, on the 21st floor, 2.5 miles") == (
        "it's nine dollars fifty percent off on the twenty first floor two point five miles")
    assert sentences(["Hi there. How are you? Fine", ""]) == [["hi", "there"], ["how", "are", "you"], ["fine"]]


# -- interface ---------------------------------------------------------------------------

def test_build_asr_contract(asr):
    assert isinstance(asr, ASR)
    assert asr.name == "pocketsphinx-scene-lm" and asr.version
    assert build_asr("pocketsphinx", discount=0.3).version != asr.version  # settings are part of the version
    with pytest.raises(ValueError, match="unknown ASR kind"):
        build_asr("whisper")


@pytest.mark.skipif(importlib.util.find_spec("qwen_asr") is not None, reason="qwen-asr is installed here")
def test_qwen3_without_its_package_is_a_clear_error():
    with pytest.raises(RuntimeError, match="pip install qwen-asr"):
        build_asr("qwen3")


def test_oov_words_split_lm_sentences(asr):
    sents, oov = asr.lm_sentences(["Nina's zorblat is on Thursday."])
    assert oov == ["zorblat"]  # "nina's" is not in the dictionary either, but its stem is
    assert ["nina"] in sents and ["is", "on", "thursday"] in sents  # no bigram across the OOV word


@pytest.mark.parametrize(("bad", "message"), [
    (np.zeros((2, SR), np.float32), r"ASR input: expected a mono 1-D array, got shape \(2, 24000\)"),
    (np.array([0.0, np.nan], np.float32), "ASR input: contains NaN or Inf samples"),
    (np.zeros(SR, np.int16), "ASR input: expected float samples, got int16"),
])
def test_rejects_bad_audio(asr, bad, message):
    with pytest.raises(ValueError, match=message):  # AudioError is a ValueError
        asr.transcribe(bad, SR, SCENE)
    with pytest.raises(ValueError, match="sample_rate must be positive, got 0"):
        asr.transcribe(np.zeros(SR, np.float32), 0, SCENE)


def test_digital_silence_and_tiny_inputs_give_empty_text(asr):
    for x in (np.zeros(2 * SR, np.float32), np.zeros(0, np.float32), np.zeros(100, np.float32)):
        assert asr.transcribe(x, SR, SCENE) == Transcript("")
    assert asr.transcribe(np.zeros(SR, np.float32), SR).text == ""  # no vocabulary: built-in words only


# -- real speech -------------------------------------------------------------------------

@pytest.mark.parametrize("voice", ["en-us+f3", "en-us+m1"])
def test_wer_on_espeak_answers(asr, tts, voice):
    errors = total = 0
    for text in ANSWERS:
        hyp = asr.transcribe(tts.synthesize(text, voice), SR, SCENE)
        ref = normalize(text).split()
        errors += edit_distance(ref, hyp.text.split())
        total += len(ref)
    assert errors / total <= WER_BOUND, (voice, errors, total)


def test_transcript_form_word_times_and_determinism(asr, tts):
    lead = np.zeros(SR // 2, np.float32)
    speech = tts.synthesize("The dentist appointment is on Thursday at three.", "en-us+m1")
    x = np.concatenate([lead, speech, lead])
    t = asr.transcribe(x, SR, SCENE)
    assert t.text == " ".join(w for w, _, _ in t.words)
    assert re.fullmatch(r"[a-z']+( [a-z']+)*", t.text)
    assert "thursday" in t.text.split()
    starts = [s for _, s, _ in t.words]
    assert starts == sorted(starts)
    assert all(0.0 <= s <= e <= x.size / SR for _, s, e in t.words)
    assert 0.3 <= t.words[0][1] <= 0.8  # the first word starts near the end of the 0.5 s lead-in
    assert asr.transcribe(x, SR, SCENE) == t  # dither is seeded: same input, same transcript
    # another input rate reaches the same decoder input (16 kHz) through the resampler
    from harness.audio.resample import resample

    assert asr.transcribe(resample(x, SR, 16_000), 16_000, SCENE).text == t.text


def test_edit_distance_counts_word_edits():
    assert edit_distance([], []) == 0
    assert edit_distance(["thursday", "at", "three"], ["thursday", "at", "three"]) == 0
    assert edit_distance(["thursday", "at", "three"], ["thursday", "three"]) == 1  # one deletion
    assert edit_distance(["thursday", "at", "three"], ["friday", "at", "three", "pm"]) == 2  # sub + insertion
    assert edit_distance(["a", "b"], []) == 2 and edit_distance([], ["a"]) == 1


# -- Qwen3-ASR with a recording stand-in for the qwen_asr package --------------------------

class FakeQwen:
    """Records what ``qwen_asr.Qwen3ASRModel`` is loaded and called with; replies ``text`` and
    ``time_stamps`` (an iterable of items with ``text``/``start_time``/``end_time``, as the
    package's ForcedAlignResult)."""

    def __init__(self) -> None:
        self.text = "It's $9, at 3 PM."
        self.time_stamps = None
        self.loads: list[tuple[str, dict]] = []
        self.calls: list[dict] = []
        fake = self

        class Qwen3ASRModel:
            @classmethod
            def from_pretrained(cls, path, **kwargs):
                fake.loads.append((path, kwargs))
                return cls()

            def transcribe(self, audio, context, language, return_time_stamps):
                fake.calls.append({"audio": audio, "context": context, "language": language,
                                   "return_time_stamps": return_time_stamps})
                return [SimpleNamespace(language=language, text=fake.text, time_stamps=fake.time_stamps)]

        self.module = types.ModuleType("qwen_asr")
        self.module.Qwen3ASRModel = Qwen3ASRModel


@pytest.fixture
def qwen(monkeypatch) -> FakeQwen:
    fake = FakeQwen()
    monkeypatch.setitem(sys.modules, "qwen_asr", fake.module)
    if importlib.util.find_spec("transformers") is None:  # the harness venv has none; the GPU image has it
        monkeypatch.setitem(sys.modules, "transformers", types.ModuleType("transformers"))
    return fake


def test_qwen3_loads_once_from_a_local_dir_and_sends_16khz_audio_and_the_context(qwen, tmp_path):
    asr = build_asr("qwen3", model=str(tmp_path), device="cpu", dtype="float32")
    assert asr.name == "qwen3-asr" and asr.version.startswith("1+qwen-asr")
    assert qwen.loads == []  # weights load lazily
    x = (0.3 * np.sin(2 * np.pi * 440 * np.arange(36_000) / SR)).astype(np.float32)  # 1.5 s at 24 kHz
    vocab = ["  Aria, when does the bus leave? ", "", "Take the tickets."]
    t = asr.transcribe(x, SR, vocab)
    assert t == Transcript("it's nine dollars at three pm")  # normalised like every backend; no word times
    assert asr.transcribe(x, SR, vocab) == t
    assert qwen.loads == [(str(tmp_path), {"dtype": torch.float32, "device_map": "cpu",
                                           "max_inference_batch_size": 8, "max_new_tokens": 256})]
    call = qwen.calls[0]
    y, rate = call["audio"]
    assert rate == 16_000 and y.dtype == np.float32 and y.shape == (24_000,)  # 1.5 s at 16 kHz
    assert call["context"] == "Aria, when does the bus leave? Take the tickets."
    assert (call["language"], call["return_time_stamps"]) == ("English", False)
    short = build_asr("qwen3", model=str(tmp_path), max_context_chars=20)
    short.transcribe(x, SR, vocab)
    assert qwen.calls[-1]["context"] == "e? Take the tickets."  # the last 20 characters
    build_asr("qwen3", model=str(tmp_path), use_context=False).transcribe(x, SR, vocab)
    assert qwen.calls[-1]["context"] == ""


def test_qwen3_under_100_ms_is_empty_without_a_model_call(qwen, tmp_path):
    asr = build_asr("qwen3", model=str(tmp_path))
    assert asr.transcribe(np.full(2399, 0.1, np.float32), SR, SCENE) == Transcript("")  # 99.96 ms at 24 kHz
    assert qwen.loads == qwen.calls == []
    asr.transcribe(np.full(2400, 0.1, np.float32), SR, SCENE)  # exactly 100 ms is transcribed
    assert len(qwen.calls) == 1 and qwen.calls[0]["audio"][0].shape == (1600,)


def test_qwen3_word_times_come_from_the_forced_aligner(qwen, tmp_path):
    aligner = tmp_path / "aligner"
    aligner.mkdir()
    asr = build_asr("qwen3", model=str(tmp_path), device="cpu", forced_aligner=str(aligner))
    qwen.text = "Thursday at 3."
    qwen.time_stamps = [SimpleNamespace(text="Thursday", start_time=0.08, end_time=0.5),
                        SimpleNamespace(text="at", start_time=None, end_time=0.6),  # unaligned: dropped
                        SimpleNamespace(text="3", start_time=0.64, end_time=0.9)]
    t = asr.transcribe(np.full(SR, 0.1, np.float32), SR, SCENE)
    assert t == Transcript("thursday at three", (("thursday", 0.08, 0.5), ("three", 0.64, 0.9)))
    assert qwen.calls[0]["return_time_stamps"] is True
    ((path, kwargs),) = qwen.loads
    assert path == str(tmp_path)
    assert kwargs["forced_aligner"] == str(aligner)
    assert kwargs["forced_aligner_kwargs"] == {"dtype": torch.bfloat16, "device_map": "cpu"}


def test_qwen3_never_downloads_a_missing_snapshot(qwen, monkeypatch):
    seen = []

    def snapshot_download(repo, local_files_only):
        seen.append((repo, local_files_only))
        raise FileNotFoundError("not in the local cache")

    hub = types.ModuleType("huggingface_hub")
    hub.snapshot_download = snapshot_download
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    asr = build_asr("qwen3")
    with pytest.raises(RuntimeError, match=r"'Qwen/Qwen3-ASR-1\.7B' are not in the Hugging Face cache"):
        asr.transcribe(np.full(SR, 0.1, np.float32), SR, SCENE)
    assert seen == [("Qwen/Qwen3-ASR-1.7B", True)] and qwen.loads == []
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # not importable at all
    with pytest.raises(RuntimeError, match=r"cannot look up 'Qwen/Qwen3-ASR-1\.7B' in the Hugging Face cache"):
        asr.load()


# the scene of the biasing tests: its gold answer and N4 answer are said by nobody in the room
BUS = Scene("p3-explicit", "p3", "explicit", ("A", "B", "C"), (
    Turn("A", "Bob, grab the tickets.", Label.N2, Target.HUMAN),
    Turn("B", "Aria, when does the bus leave?", Label.T, Target.ARIA),
    Turn("C", "ARIA, how tall is Everest?", Label.N4_Q, Target.ARIA, answer="About 8,849 metres."),
    Turn("A", "It's about nine kilometres, Bob.", Label.N4_R, Target.HUMAN),
), "at nine fifteen")


@pytest.mark.parametrize("bias", [False, True])
def test_qwen3_context_has_the_gold_answer_only_with_bias_with_gold(qwen, tmp_path, bias):
    from harness.scoring.cache import ContentCache
    from harness.scoring.flow import ConversationScorer, scene_vocabulary
    from harness.scoring.judge.lexical import LexicalJudge
    from harness.store.base import LocalStore

    assert scene_vocabulary(BUS, DUTY_TEXT, bias) == [
        "Bob, grab the tickets.", "Aria, when does the bus leave?", "ARIA, how tall is Everest?",
        "It's about nine kilometres, Bob.", *(["About 8,849 metres.", "at nine fifteen"] if bias else []), DUTY_TEXT]
    asr = build_asr("qwen3", model=str(tmp_path), device="cpu")
    scorer = ConversationScorer(asr, LexicalJudge(), ContentCache(LocalStore(tmp_path / "store"), "asr"), SR,
                                DUTY_TEXT, bias_with_gold=bias)
    qwen.text = "at nine fifteen"
    row = {"kind": "T", "turn": 1, "response_presence": True, "end": 0, "window_end": SR}
    out = scorer.score(BUS, [row], np.full(SR, 0.1, np.float32), np.array([[0, SR]]))
    assert out["T:1"]["passed"] is True
    context = qwen.calls[0]["context"]
    assert context.startswith("Bob, grab the tickets. Aria, when does the bus leave?")
    assert ("at nine fifteen" in context, "8,849" in context) == (bias, bias)
