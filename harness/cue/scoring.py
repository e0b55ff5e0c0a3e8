"""Duplex Cue scoring (spec section 9; docs/cue.md, "Scoring"): transcripts with word times,
the Continued / Adapted / Yielded labels, eligibility, and one row per item.

Per item there are two *conditions*, each a response to B's cue over the same window
``[switch_s, end_s)`` of the recording timeline (``end_s = switch_s + window_s``):

* ``model``: the model's free output after the switch point (the cue-infer stage's output);
* ``reference``: A's recorded channel over the same window.

Each response is analysed the same way (:func:`analyse_response`): speech segments by the
offline Silero VAD over the span the model was fed plus the window (``[start_s, end_s)``),
whether it is speech at the cue onset, and the window's words with times from an ASR backend
(:class:`WordTranscriber`, content-hash cached). A *labeller* then gives one of
:data:`~harness.cue.schema.RESPONSES`, or ``None`` when the response cannot be labelled:

* :class:`RuleLabeler`, the offline stand-in (:data:`RULE_LABELER`; the rule is in docs/cue.md);
* :class:`LLMLabeler`, an LLM reviewer (Anthropic or Gemini through the judge's backends,
  prompt ``prompts/cue_label_v2.txt``) given up to ``review_context_s`` of prior context
  (both speakers' words with times) and the window; content-hash cached, cost counted.

Eligibility (:func:`exclusion`): A is active at the cue onset in both conditions, and both
responses got a label. Items whose continuation errored are error rows: never labelled,
never counted as a response (in particular never as Yielded silence).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.cue.schema import RESPONSES, CueItem, Recording, Word
from harness.scoring.asr import ASR
from harness.scoring.asr.text import words as tokens
from harness.scoring.cache import ContentCache, MeteredCache
from harness.scoring.judge import Cost, build_judge, parse_label
from harness.scoring.judge.llm import LLMJudge, _data, load_prompt, prompt_path

RULE_LABELER = "rule (stand-in, not the paper's reviewer)"
LLM_KINDS = ("anthropic", "gemini")
# why an item is not in the statistics, in funnel order (docs/cue.md, "Eligibility")
EXCLUSIONS = ("error", "model_inactive_at_onset", "reference_inactive_at_onset", "model_unscoreable",
              "reference_unscoreable")

#: Acknowledgement tokens of the rule (lower case, as :func:`harness.scoring.asr.text.words`
#: splits them: "uh-huh" -> "uh", "huh"; "uh" itself is a hesitation, not an acknowledgement).
ACK_TOKENS = frozenset({"oh", "yes", "yeah", "yep", "no", "nope", "right", "sure", "okay", "ok", "sorry",
                        "exactly", "mm", "hm", "hmm", "mhm", "huh", "thanks", "anyway", "ah", "true"})
#: Function words that never count as taking up the cue's words.
STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "so", "of", "to", "in", "on", "at", "for", "from", "with", "by", "about",
    "as", "is", "are", "was", "were", "be", "been", "it", "its", "it's", "this", "that", "these", "those", "there",
    "here", "i", "you", "he", "she", "we", "they", "me", "him", "her", "us", "them", "my", "your", "his", "our",
    "their", "do", "did", "does", "have", "has", "had", "not", "what", "who", "when", "where", "how", "why", "can",
    "could", "would", "will", "just", "then", "than", "very", "up", "down", "out", "over", "all", "some", "any"})
#: How long a Silero speech segment may run on after the speech stops (``cue.vad_release_s``).
VAD_RELEASE_S = 0.08
#: Generic phrases added to every transcription vocabulary (pocketsphinx LM / Qwen3 context).
ACK_SENTENCES = ("Oh right.", "Yes, exactly.", "Sorry, I mean.", "Okay.", "Oh, thanks.", "Sure.", "Anyway.",
                 "Oh no.", "Yeah, right.", "Mm hmm.", "Uh huh.")


@dataclass(frozen=True)
class Response:
    """One condition's response to a cue, on the recording timeline (seconds).

    Attributes:
        condition: ``"model"`` or ``"reference"``.
        words: recognised words in ``[switch_s, end_s)`` with recording-timeline times.
        speech: VAD speech segments ``(start_s, end_s)`` in the analysed span ``[start_s, end_s)``.
        active_at_onset: speaking at the cue onset (:func:`active_at`).
    """

    condition: str
    words: tuple[Word, ...]
    speech: tuple[tuple[float, float], ...]
    active_at_onset: bool

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)

    def speech_in(self, t0: float, t1: float) -> float:
        """Seconds of speech inside ``[t0, t1)``."""
        return float(sum(max(0.0, min(b, t1) - max(a, t0)) for a, b in self.speech))


@dataclass(frozen=True)
class CueView:
    """What a labeller is told about a cue besides the response (times on the recording timeline).

    Attributes:
        item: the cue item (intent, cue words).
        switch_s, end_s: the window.
        context_s: how far back the context reaches (``review_context_s``).
        context: ``(speaker, word)`` in ``[switch_s - context_s, switch_s)``, both speakers, in time order.
        b_window: B's words in ``[switch_s, end_s)`` (B keeps talking on its own timeline).
    """

    item: CueItem
    switch_s: float
    end_s: float
    context_s: float
    context: tuple[tuple[str, Word], ...]
    b_window: tuple[Word, ...]

    @property
    def cue_end_s(self) -> float:
        return self.item.cue_words[-1].end_s


@dataclass(frozen=True)
class Labelled:
    """A labeller's output: ``label`` in :data:`RESPONSES`, or ``None`` (unscoreable: why in ``raw``)."""

    label: str | None
    raw: str
    cost: Cost = field(default_factory=Cost)

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "raw": self.raw, "cost": self.cost.to_dict()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Labelled:
        return cls(d["label"], str(d.get("raw", "")), Cost.from_dict(d.get("cost", {})))


# ------------------------------------------------------------------------------- labellers


class RuleLabeler:
    """The offline stand-in labeller (:data:`RULE_LABELER`; docs/cue.md, "The rule labeller").

    In order, on the response's speech and words from the cue onset on:

    1. **yielded** when its speech in ``[cue_onset_s, end_s)`` is under ``yield_max_speech_share``
       of that span (the speaker is silent for most of the window after the cue);
    2. ``None`` (unscoreable) when it speaks that much but no word was recognised;
    3. **adapted** when one of its first ``ack_words`` words starting at or after the cue onset
       is an acknowledgement token (:data:`ACK_TOKENS`), or one of its first ``uptake_words``
       such words is a content word of the cue (not in :data:`STOPWORDS`);
    4. **continued** otherwise.

    Args:
        yield_max_speech_share: in ``(0, 1]``.
        ack_words, uptake_words: ``int >= 0``.

    Raises:
        ValueError: a parameter out of range.
    """

    name = "rule"
    description = RULE_LABELER
    llm = False

    def __init__(self, yield_max_speech_share: float = 0.25, ack_words: int = 2, uptake_words: int = 4):
        if not 0.0 < float(yield_max_speech_share) <= 1.0:
            raise ValueError(f"yield_max_speech_share must lie in (0, 1], got {yield_max_speech_share}")
        if int(ack_words) < 0 or int(uptake_words) < 0:
            raise ValueError(f"ack_words and uptake_words must be >= 0, got {ack_words}, {uptake_words}")
        self.yield_max_speech_share = float(yield_max_speech_share)
        self.ack_words, self.uptake_words = int(ack_words), int(uptake_words)
        self.hits = self.misses = 0  # the counters every labeller has (an offline rule never pays)
        self.cost = self.saved = Cost()

    def label(self, view: CueView, response: Response) -> Labelled:
        onset = view.item.cue_onset_s
        span = view.end_s - onset
        speech = response.speech_in(onset, view.end_s)
        if span <= 0 or speech < self.yield_max_speech_share * span:
            return Labelled("yielded", f"speech {speech:.2f} s of {span:.2f} s after the cue onset "
                                       f"< {self.yield_max_speech_share:g} of it")
        after = [w.text for w in response.words if w.start_s >= onset]
        if not after:
            return Labelled(None, f"speech {speech:.2f} s after the cue onset but no recognised word")
        acks = [t for t in after[: self.ack_words] if t in ACK_TOKENS]
        if acks:
            return Labelled("adapted", f"acknowledgement {acks[0]!r} among the first {self.ack_words} words")
        cue = {t for w in view.item.cue_words for t in tokens(w.text)} - STOPWORDS
        taken = [t for t in after[: self.uptake_words] if t in cue]
        if taken:
            return Labelled("adapted", f"takes up the cue's {taken[0]!r} among the first {self.uptake_words} words")
        return Labelled("continued", f"first words {' '.join(after[:self.uptake_words])!r}: no acknowledgement, "
                                     "no cue word")


PROMPT = "cue_label_v2.txt"  # v2 (issue 23.7): word start and end times; ADAPTED is uptake, not correctness
PROMPT_FIELDS = frozenset({"context_s", "context", "cue_onset_s", "cue", "window_start_s", "window_end_s",
                           "window", "speech_s", "after_cue_s"})
LABELS = tuple(r.upper() for r in RESPONSES)  # what the LLM answers


def _lines(entries: Iterable[tuple[str, Word]]) -> str:
    """The packet's word lines, in time order: ``12.34-12.61 A: word``, one per word, with its
    start and end (seconds on the recording timeline)."""
    return "\n".join(f"{w.start_s:.2f}-{w.end_s:.2f} {spk}: {_data(w.text)}"
                     for spk, w in sorted(entries, key=lambda e: (e[1].start_s, e[0]))) or "(nothing)"


class LLMLabeler(MeteredCache):
    """The LLM reviewer: one call per response, cached by content, cost counted.

    Args:
        kind: ``"anthropic"`` or ``"gemini"`` (the judge's backends: same SDK path, keys from the
            environment only, price table, usage fields).
        store, cache_prefix: the content cache (both, or neither for no cache).
        prompt, prompts_dir: the prompt file (placeholders :data:`PROMPT_FIELDS`).
        **params: the backend's parameters (``model``, ``client`` for a fake, ``price_per_mtok``,
            ``max_output_tokens``, ...), as for :func:`harness.scoring.judge.build_judge`.

    A reply naming anything but exactly one of CONTINUED / ADAPTED / YIELDED gives ``None``
    (unscoreable), kept verbatim in ``raw`` and stored, but never served from the cache: the next
    run asks again (``retried``). API errors propagate and are never cached. A cache hit returns
    the stored label with its cost zeroed (the original cost is added to ``saved``).
    """

    llm = True

    def __init__(self, kind: str, store: Any = None, cache_prefix: str | None = None, prompt: str = PROMPT,
                 prompts_dir: str | Path | None = None, **params: Any):
        if kind not in LLM_KINDS:
            raise ValueError(f"unknown LLM labeller {kind!r}; expected one of {', '.join(LLM_KINDS)}")
        if (store is None) != (cache_prefix is None):
            raise ValueError("give both store and cache_prefix (a cached labeller) or neither")
        self.backend: LLMJudge = build_judge(kind, **params)  # type: ignore[assignment]
        self.name, self.model = self.backend.name, self.backend.model
        self.prompt = load_prompt(prompt_path(prompts_dir, prompt), PROMPT_FIELDS)
        self.description = f"LLM reviewer: {self.name} `{self.model}`, prompt `{self.prompt.version}`"
        # an unscoreable reply is stored for audit but asked again next time (as the judge's UNPARSEABLE)
        super().__init__(ContentCache(store, cache_prefix) if store is not None else None,
                         reuse=lambda labelled: labelled.label is not None)

    def prompt_text(self, view: CueView, response: Response) -> str:
        onset = view.item.cue_onset_s
        window = [("B", w) for w in view.b_window] + [("A", w) for w in response.words]
        return self.prompt.render(
            context_s=f"{view.context_s:g}", context=_lines(view.context), cue_onset_s=f"{onset:.2f}",
            cue=_data(" ".join(w.text for w in view.item.cue_words)), window_start_s=f"{view.switch_s:.2f}",
            window_end_s=f"{view.end_s:.2f}", window=_lines(window),
            speech_s=f"{response.speech_in(onset, view.end_s):.2f}", after_cue_s=f"{view.end_s - onset:.2f}")

    def key_parts(self, prompt: str) -> dict[str, Any]:
        return {"task": "cue_label", "backend": self.name, "model": self.model, "prompt_version": self.prompt.version,
                "settings": self.backend.settings, "prompt": prompt}

    def _ask(self, prompt: str) -> Labelled:
        raw, cost = self.backend.complete(prompt)
        label = parse_label(raw, LABELS)
        return Labelled(label.lower() if label in LABELS else None, raw, cost)

    def label(self, view: CueView, response: Response) -> Labelled:
        prompt = self.prompt_text(view, response)
        return self.paid(self.key_parts(prompt), lambda: self._ask(prompt), Labelled)


Labeler = RuleLabeler | LLMLabeler


def build_labeler(kind: str, params: Mapping[str, Any] | None = None, store: Any = None,
                  cache_prefix: str | None = None) -> Labeler:
    """The labeller ``kind`` (``cue.labeler``): ``"rule"`` or an LLM backend (:data:`LLM_KINDS`),
    with ``params`` (``cue.labeler_params``). Raises ValueError for an unknown kind or bad params."""
    params = dict(params or {})
    if kind == "rule":
        return RuleLabeler(**params)
    if kind in LLM_KINDS:
        return LLMLabeler(kind, store, cache_prefix, **params)
    raise ValueError(f"unknown cue labeler {kind!r}; expected rule or one of {', '.join(LLM_KINDS)}")


# ------------------------------------------------------------------------------- transcription


class WordTranscriber:
    """Words with times of an audio span through an ASR backend, cached by content.

    Args:
        asr: a :class:`harness.scoring.asr.ASR`; pocketsphinx gives word times, Qwen3-ASR only with
            its ``forced_aligner`` (without one its words are spread evenly over the span's speech:
            see :meth:`words`).
        cache: a :class:`ContentCache` (e.g. the shared ``asr`` cache), or None.
        sample_rate: Hz of the audio given.
    """

    def __init__(self, asr: ASR, cache: ContentCache | None, sample_rate: int):
        self.asr, self.cache, self.sr = asr, cache, sample_rate
        self.asr_calls = 0
        self._lock = threading.Lock()

    def words(self, audio: np.ndarray, t0_s: float, vocabulary: Sequence[str] = ()) -> tuple[Word, ...]:
        """The words of mono ``float32[n]`` audio that starts at ``t0_s`` on the recording timeline.

        Returns words with recording-timeline times. A backend that returns text without word
        times (Qwen3-ASR without an aligner) gets its words placed evenly over the span, marked
        by the span being the only timing there is; such words are good for uptake, not timing.
        """
        audio = np.ascontiguousarray(audio, dtype=np.float32)
        parts = {"asr": self.asr.name, "version": self.asr.version, "sample_rate": self.sr, "task": "cue_words",
                 "audio_sha256": hashlib.sha256(audio.tobytes()).hexdigest(), "vocabulary": list(vocabulary)}

        def run() -> dict[str, Any]:
            with self._lock:
                self.asr_calls += 1
            t = self.asr.transcribe(audio, self.sr, vocabulary)
            timed = [list(w) for w in t.words]
            if not timed and t.text:
                toks, dur = t.text.split(), audio.size / self.sr
                timed = [[w, i * dur / len(toks), (i + 1) * dur / len(toks)] for i, w in enumerate(toks)]
            return {"text": t.text, "words": timed}

        out = self.cache.get_or_compute(parts, run) if self.cache is not None else run()
        return tuple(Word(str(w), round(t0_s + float(a), 3), round(t0_s + max(float(b), float(a) + 1e-3), 3))
                     for w, a, b in out["words"])


def vocabulary(recording: Recording, item: CueItem, switch_s: float) -> list[str]:
    """The ASR vocabulary (pocketsphinx's language model, Qwen3-ASR's context) of an item's
    window, the same for both conditions (docs/cue.md, "Scoring"): A's words that begin before
    ``switch_s`` (what the model was forced to say), B's words (what it hears), B's cue and
    :data:`ACK_SENTENCES`. Never A's recorded words after the switch point: they are the
    reference response, and in the vocabulary they would pull the model's transcript towards
    it (and make the reference's transcript better than the model's, biasing the paired
    comparison)."""
    before = " ".join(w.text for w in recording.a_words if w.start_s < switch_s)
    return [before, " ".join(w.text for w in recording.b_words), " ".join(w.text for w in item.cue_words),
            *ACK_SENTENCES]


# ------------------------------------------------------------------------------- analysis


def span(x: np.ndarray, t0: float, t1: float, sample_rate: int, origin_s: float = 0.0) -> np.ndarray:
    """Samples of ``x`` (which starts at ``origin_s``) covering ``[t0, t1)`` seconds, zero-padded
    where ``x`` ends early. Returns ``float32[round((t1 - t0) * sample_rate)]``."""
    a = round((t0 - origin_s) * sample_rate)
    n = max(0, round((t1 - t0) * sample_rate))
    out = np.zeros(n, np.float32)
    lo, hi = max(a, 0), min(a + n, len(x))
    if hi > lo:
        out[lo - a: hi - a] = x[lo:hi]
    return out


def segments_s(segments: Any, origin_s: float, sample_rate: int) -> tuple[tuple[float, float], ...]:
    """``int[k, 2]`` sample segments of a span starting at ``origin_s`` -> recording-timeline seconds."""
    return tuple((origin_s + int(a) / sample_rate, origin_s + int(b) / sample_rate)
                 for a, b in np.asarray(segments, dtype=np.int64).reshape(-1, 2))


def active_at(speech: Sequence[tuple[float, float]], onset_s: float, release_s: float = VAD_RELEASE_S) -> bool:
    """"Active at the cue onset" (paper: A is active at the cue onset in both conditions;
    docs/cue.md, "Eligibility"): a speech segment ``[a, b)`` (seconds) holds the onset even
    after its last ``release_s`` is taken off, ``a <= onset_s < b - release_s``.

    Silero's segments run on up to about 80 ms (``cue.vad_release_s``) after speech stops, so a
    segment that ends less than ``release_s`` after the onset may be the release tail of speech
    that stopped before it: a model that falls silent at the switch point (80 ms before the
    onset), before it has heard any of the cue, is not active. The model's output is A's forced
    audio only up to the switch point, so what holds the onset is its own free output; the same
    rule applies to A's recording. ``release_s >= 0``."""
    return any(a <= onset_s < b - release_s for a, b in speech)


def analyse_response(condition: str, audio: np.ndarray, origin_s: float, speech: Sequence[tuple[float, float]],
                     item: CueItem, switch_s: float, end_s: float, sample_rate: int,
                     transcriber: WordTranscriber, vocab: Sequence[str], release_s: float = VAD_RELEASE_S) -> Response:
    """One condition's :class:`Response`.

    Args:
        condition: ``"model"`` or ``"reference"``.
        audio: mono ``float32[n]`` at ``sample_rate``, starting at ``origin_s`` on the recording timeline.
        speech: its VAD segments in recording-timeline seconds (:func:`segments_s`).
        item: the cue; ``switch_s``/``end_s`` the window, transcribed by ``transcriber`` with
            ``vocab`` (:func:`vocabulary`) unless the VAD found no speech in it (then it has no
            words and costs no ASR call).
        release_s: the VAD's release allowance of :func:`active_at` (``cue.vad_release_s``).
    """
    silent = not any(a < end_s and b > switch_s for a, b in speech)  # nothing to transcribe: no ASR call
    words = () if silent else transcriber.words(span(audio, switch_s, end_s, sample_rate, origin_s), switch_s, vocab)
    return Response(condition, words, tuple(speech), active_at(speech, item.cue_onset_s, release_s))


def cue_view(item: CueItem, recording: Recording, switch_s: float, end_s: float, context_s: float,
             words_of: Callable[[str, float, float], tuple[Word, ...]] | None = None) -> CueView:
    """The labeller's view of ``item``: both speakers' words that begin in
    ``[switch_s - context_s, switch_s)``, a word still being said at the switch point cut there
    (its part after the switch point is the response under review), and B's words in the window.
    Words come from the recording (``a_words``/``b_words``); a recording without them needs
    ``words_of(speaker, t0, t1)`` (e.g. an ASR of that channel)."""

    def words(spk: str, t0: float, t1: float) -> tuple[Word, ...]:
        own = recording.a_words if spk == "A" else recording.b_words
        if own or words_of is None:
            return tuple(w for w in own if t0 <= w.start_s < t1)
        return words_of(spk, t0, t1)

    c0 = max(0.0, switch_s - context_s)
    context = tuple(sorted([(spk, Word(w.text, w.start_s, min(w.end_s, switch_s)))
                            for spk in ("A", "B") for w in words(spk, c0, switch_s)],
                           key=lambda e: (e[1].start_s, e[0])))
    return CueView(item, switch_s, end_s, context_s, context, words("B", switch_s, end_s))


def exclusion(error: str | None, model: Response | None, reference: Response | None,
              model_label: str | None, reference_label: str | None) -> str | None:
    """The first exclusion of :data:`EXCLUSIONS` that applies, or ``None`` (eligible)."""
    if error is not None or model is None or reference is None:
        return "error"
    if not model.active_at_onset:
        return "model_inactive_at_onset"
    if not reference.active_at_onset:
        return "reference_inactive_at_onset"
    if model_label is None:
        return "model_unscoreable"
    if reference_label is None:
        return "reference_unscoreable"
    return None


def _words_json(words: Sequence[Word] | None) -> list[list[Any]] | None:
    return None if words is None else [[w.text, w.start_s, w.end_s] for w in words]


def item_row(item: CueItem, switch_s: float, end_s: float, labeler: str, error: str | None = None,
             model: Response | None = None, reference: Response | None = None,
             model_label: Labelled | None = None, reference_label: Labelled | None = None) -> dict[str, Any]:
    """One row of ``rows.json`` (docs/cue.md, "rows.json"). An ``error`` row has no response and no label."""
    ml = model_label.label if model_label is not None else None
    rl = reference_label.label if reference_label is not None else None
    why = exclusion(error, model, reference, ml, rl)
    row: dict[str, Any] = {
        "item_id": item.item_id, "recording_id": item.recording_id, "intent": item.intent, "known_label": item.label,
        "cue_onset_s": item.cue_onset_s, "switch_s": switch_s, "end_s": end_s,
        "eligible": why is None, "exclusion": why, "error": error, "labeler": labeler,
        "model_label": ml, "reference_label": rl,
        "model_label_raw": model_label.raw if model_label else None,
        "reference_label_raw": reference_label.raw if reference_label else None,
        "usd": (model_label.cost.usd if model_label else 0.0) + (reference_label.cost.usd if reference_label else 0.0),
    }
    for name, r in (("model", model), ("reference", reference)):
        row[f"{name}_active_at_onset"] = None if r is None else r.active_at_onset
        row[f"{name}_speech_after_cue_s"] = None if r is None else round(r.speech_in(item.cue_onset_s, end_s), 3)
        row[f"{name}_text"] = None if r is None else r.text
        row[f"{name}_words"] = _words_json(None if r is None else r.words)
        row[f"{name}_speech"] = None if r is None else [[round(a, 3), round(b, 3)] for a, b in r.speech]
    return row


def label_pair(labeler: Labeler, view: CueView, model: Response,
               reference: Response) -> tuple[Labelled | None, Labelled | None]:
    """Labels of both responses; none when either is inactive at the cue onset (excluded before
    labelling, so an LLM reviewer is not paid for items that cannot count)."""
    if not (model.active_at_onset and reference.active_at_onset):
        return None, None
    return labeler.label(view, model), labeler.label(view, reference)


__all__ = ["ACK_SENTENCES", "ACK_TOKENS", "EXCLUSIONS", "LLM_KINDS", "PROMPT", "RULE_LABELER",
           "STOPWORDS", "VAD_RELEASE_S", "CueView", "LLMLabeler", "Labeler", "Labelled", "Response", "RuleLabeler",
           "WordTranscriber", "active_at", "analyse_response", "build_labeler", "cue_view", "exclusion", "item_row",
           "label_pair", "segments_s", "span", "vocabulary"]
