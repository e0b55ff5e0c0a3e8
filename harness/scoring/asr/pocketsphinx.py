"""The offline ASR backend: PocketSphinx 5 with a bigram LM built from the scene's own text.

PyPI ``pocketsphinx`` 5.1 ships an en-us acoustic model and the CMU dictionary. Its general
LM is useless on espeak-ng speech, but a tiny LM built from the text the speech is expected
to come from (the scene's turns and the duty preamble; the gold answer only with
``asr.bias_with_gold``) works well (``docs/asr.md`` has the measured WER). Recipe per call:

1. tokenise ``vocabulary`` into sentences (:mod:`harness.scoring.asr.text`), plus, unless
   ``base_vocabulary=False``, :data:`BASE_SENTENCES` (backchannels, numbers, days, months)
   so that a model saying something generic is not forced onto scene words;
2. map every token through the pocketsphinx dictionary: a token in the dictionary is kept;
   a possessive whose stem is in it (``"priya's"`` -> ``"priya"``) becomes the stem; any
   other token is out of vocabulary and **splits the sentence** there (it is dropped, and no
   bigram is formed across the gap, so the LM never learns a word pair that is never said);
3. write the bigram ARPA LM (:mod:`harness.scoring.asr.arpa`) and a **reduced dictionary**
   (only the LM's words, every pronunciation variant) to a temporary directory and build a
   decoder on them; decoders are cached per (LM, dictionary) hash, LRU. The reduced
   dictionary matters: with the full 126k-word CMU dictionary, adding an LM search costs
   ~13 s on this machine; with the reduced one a whole decoder takes ~20 ms;
4. resample the audio to 16 kHz (torchaudio), pad ``pad_s`` of silence at both ends (the
   decoder mis-hears speech that starts on the first frame), add Gaussian dither of std
   ``dither`` (seeded, so a transcript is deterministic; digital silence otherwise breaks
   decoding) and decode the whole window as one utterance;
5. normalise: lower case, alternate-pronunciation marks (``"(2)"``) removed, ``<s>``,
   ``</s>``, ``<sil>`` and ``[NOISE]``-style fillers dropped; word times come from the
   decoder's segmentation (100 frames per second), relative to the input's first sample.

Decoding is serialised per instance by a lock (pocketsphinx decoders are not thread-safe).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Sequence
from functools import cache
from importlib import metadata
from typing import Any

import numpy as np

from harness.scoring.asr import Transcript, prepare_input
from harness.scoring.asr.arpa import arpa_text
from harness.scoring.asr.text import sentences, words

IMPL_VERSION = "1"  # bump when this module's output may change for the same inputs
DECODE_RATE = 16_000

#: Generic things a speech model may say that a scene's text need not contain. Phrases are
#: LM sentences; the word lists at the end are split into one-word sentences (no fake bigrams).
BASE_SENTENCES: tuple[str, ...] = (
    "Yes.", "No.", "Yeah.", "Okay.", "Sure.", "Right.", "Mm hmm.", "Uh huh.", "Hmm.", "Oh.",
    "I see.", "Got it.", "Thank you.", "Thanks.", "Sorry.", "Of course.", "I don't know.", "I'm not sure.",
    "Let me think.", "That's right.", "Good question.", "Hello.", "Hi there.", "Go ahead.",
    "It is at three o'clock.", "It costs ten dollars.", "About fifty percent.",
)
BASE_WORDS: tuple[str, ...] = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty",
    "fifty", "sixty", "seventy", "eighty", "ninety", "hundred", "thousand", "million", "monday", "tuesday",
    "wednesday", "thursday", "friday", "saturday", "sunday", "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)


def _pocketsphinx_version() -> str:
    try:
        return metadata.version("pocketsphinx")
    except metadata.PackageNotFoundError:  # pragma: no cover - importable but not installed as a dist
        return "unknown"


@cache
def _read_dictionary(path: str) -> dict[str, tuple[str, ...]]:
    """``word -> pronunciations`` of a Sphinx dictionary (``word(2)`` variants folded in)."""
    out: dict[str, list[str]] = {}
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            parts = line.split(None, 1)
            if len(parts) != 2:
                continue
            word = parts[0].split("(", 1)[0].lower()
            out.setdefault(word, []).append(" ".join(parts[1].split("#", 1)[0].split()))
    return {w: tuple(p) for w, p in out.items()}


class PocketsphinxASR:
    """PocketSphinx recogniser with a per-vocabulary bigram LM (see the module docstring).

    Args:
        discount: absolute discount of the bigram LM (``0 < D < 1``).
        uniform: share of unigram mass spread evenly over the LM vocabulary.
        base_vocabulary: add :data:`BASE_SENTENCES` and :data:`BASE_WORDS` to every LM.
        dither: std of the Gaussian noise added before decoding (full scale 1.0).
        pad_s: silence added at both ends before decoding (word times are corrected for it).
        seed: seed of the dither noise.
        cache_size: number of decoders (one per distinct LM) kept.
        hmm: acoustic model directory (default: the one shipped in the wheel).
        dictionary: pronunciation dictionary (default: the shipped ``cmudict-en-us.dict``).
        decoder_options: further pocketsphinx ``Config`` options (e.g. ``{"lw": 6.5}``).
        pronunciations: ``{word: [ARPAbet phones]}`` added to the dictionary's variants (e.g. the
            assistant's name as espeak-ng says it).

    Raises:
        RuntimeError: the ``pocketsphinx`` package is not importable.
        ValueError: a parameter is out of range.
    """

    name = "pocketsphinx-scene-lm"

    def __init__(
        self,
        discount: float = 0.1,
        uniform: float = 0.1,
        base_vocabulary: bool = True,
        dither: float = 1e-4,
        pad_s: float = 0.3,
        seed: int = 0,
        cache_size: int = 8,
        hmm: str | None = None,
        dictionary: str | None = None,
        decoder_options: dict[str, Any] | None = None,
        pronunciations: dict[str, list[str]] | None = None,
    ):
        try:
            import pocketsphinx
        except ImportError as e:
            raise RuntimeError(
                f"the pocketsphinx ASR backend needs the `pocketsphinx` package ({e}); "
                "install it with `.venv/bin/pip install 'pocketsphinx>=5.1,<6'` (pinned in requirements.txt)"
            ) from None
        if not 0.0 < discount < 1.0 or not 0.0 <= uniform < 1.0 or dither < 0 or pad_s < 0 or cache_size < 1:
            raise ValueError("need 0 < discount < 1, 0 <= uniform < 1, dither >= 0, pad_s >= 0, cache_size >= 1")
        self._ps = pocketsphinx
        self.discount, self.uniform, self.base_vocabulary = discount, uniform, base_vocabulary
        self.dither, self.pad_s, self.seed, self.cache_size = dither, pad_s, seed, cache_size
        self.hmm = hmm or pocketsphinx.get_model_path("en-us/en-us")
        self.dictionary = dictionary or pocketsphinx.get_model_path("en-us/cmudict-en-us.dict")
        self.decoder_options = dict(decoder_options or {})
        self._prons = _read_dictionary(self.dictionary)
        for word, extra in (pronunciations or {}).items():  # e.g. a name as espeak-ng says it
            self._prons[word.lower()] = tuple(dict.fromkeys((*self._prons.get(word.lower(), ()), *extra)))
        self._lock = threading.Lock()
        self._decoders: OrderedDict[str, Any] = OrderedDict()  # LM hash -> Decoder
        settings = {
            "impl": IMPL_VERSION,
            "pocketsphinx": _pocketsphinx_version(),
            "discount": discount,
            "uniform": uniform,
            "base_vocabulary": base_vocabulary,
            "dither": dither,
            "pad_s": pad_s,
            "seed": seed,
            "hmm": hmm,
            "dictionary": dictionary,
            "decoder_options": self.decoder_options,
        }
        if pronunciations:  # only when given: the scoring ASR's version (and cache keys) stay as they were
            settings["pronunciations"] = pronunciations
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:8]
        self.version = f"{IMPL_VERSION}+ps{settings['pocketsphinx']}.{digest}"

    # -- LM ------------------------------------------------------------------------------

    def dict_form(self, token: str) -> str | None:
        """The dictionary word for ``token`` (itself, or a possessive's stem), or None if OOV."""
        if token in self._prons:
            return token
        for suffix in ("'s", "'"):
            if token.endswith(suffix) and token[: -len(suffix)] in self._prons:
                return token[: -len(suffix)]
        return None

    def lm_sentences(self, vocabulary: Sequence[str]) -> tuple[list[list[str]], list[str]]:
        """The LM's training sentences for ``vocabulary`` and the sorted OOV tokens dropped."""
        texts = list(vocabulary)
        if self.base_vocabulary:
            texts += [*BASE_SENTENCES, *(f"{w}." for w in BASE_WORDS)]
        out: list[list[str]] = []
        oov: set[str] = set()
        for sent in sentences(texts):
            piece: list[str] = []
            for tok in sent:
                form = self.dict_form(tok)
                if form is None:
                    oov.add(tok)
                    if piece:
                        out.append(piece)
                    piece = []
                else:
                    piece.append(form)
            if piece:
                out.append(piece)
        return out, sorted(oov)

    def _decoder(self, vocabulary: Sequence[str]) -> Any:
        sents, _ = self.lm_sentences(vocabulary)
        if not sents:
            raise ValueError("the vocabulary has no word in the pocketsphinx dictionary (and base_vocabulary is off)")
        lm = arpa_text(sents, discount=self.discount, uniform=self.uniform)
        lexicon = sorted({w for s in sents for w in s})
        dic = "".join(
            f"{w}{'' if i == 0 else f'({i + 1})'} {p}\n" for w in lexicon for i, p in enumerate(self._prons[w])
        )
        key = hashlib.sha256((lm + "\0" + dic).encode()).hexdigest()
        if key in self._decoders:
            self._decoders.move_to_end(key)
            return self._decoders[key]
        with tempfile.TemporaryDirectory(prefix="duplex-mpe-asr-") as tmp:
            lm_path, dict_path = os.path.join(tmp, "lm.arpa"), os.path.join(tmp, "words.dict")
            with open(lm_path, "w", encoding="utf-8") as fh:
                fh.write(lm)
            with open(dict_path, "w", encoding="utf-8") as fh:
                fh.write(dic)
            decoder = self._ps.Decoder(
                hmm=self.hmm, dict=dict_path, lm=lm_path, samprate=DECODE_RATE, loglevel="FATAL",
                **self.decoder_options,
            )
        self._decoders[key] = decoder
        while len(self._decoders) > self.cache_size:
            self._decoders.popitem(last=False)
        return decoder

    # -- decoding ------------------------------------------------------------------------

    def transcribe(self, audio: np.ndarray, sample_rate: int, vocabulary: Sequence[str] = ()) -> Transcript:
        """Transcribe mono ``float32[n]`` speech at ``sample_rate`` Hz (see the module docstring).

        Raises:
            ValueError: non-mono or non-finite audio, a non-positive sample rate, or a
                vocabulary with no usable word while ``base_vocabulary`` is off.
        """
        y, vocabulary = prepare_input(audio, sample_rate, vocabulary, DECODE_RATE)
        if y is None:  # under 100 ms: nothing to recognise
            return Transcript("")
        duration = y.size / DECODE_RATE
        pad = round(self.pad_s * DECODE_RATE)
        y = np.pad(y.astype(np.float64), pad)
        if self.dither > 0:
            y += self.dither * np.random.default_rng(self.seed).standard_normal(y.size)
        pcm = np.clip(np.round(y * 32767.0), -32768, 32767).astype(np.int16).tobytes()
        with self._lock:
            decoder = self._decoder(vocabulary)
            frate = int(decoder.config["frate"])
            decoder.start_utt()
            decoder.process_raw(pcm, no_search=False, full_utt=True)
            decoder.end_utt()
            # no hypothesis at all (possible without the fwdflat pass): nothing recognised
            segs = [(s.word, s.start_frame, s.end_frame) for s in decoder.seg() or ()]
        shift = pad / DECODE_RATE
        out: list[tuple[str, float, float]] = []
        for word, start, end in segs:
            if word.startswith(("<", "[", "+")):
                continue
            t0 = min(max(start / frate - shift, 0.0), duration)
            t1 = min(max((end + 1) / frate - shift, t0), duration)
            for tok in words(word.split("(", 1)[0]):
                out.append((tok, round(t0, 3), round(t1, 3)))
        return Transcript(" ".join(w for w, _, _ in out), tuple(out))
