"""The semantic scoring flow of spec section 5, for one conversation.

* **VAD pass-through**: a silence window without model speech passes without ASR or judge; a
  T request without speech in its response window is not an accuracy item.
* Windows with speech are transcribed **merged**: the model's speech segments inside the
  window, clipped to it, joined with a short silence, one ASR call. The ASR's vocabulary
  (pocketsphinx's scene LM, Qwen3-ASR's biasing context) is what was said in the room: the
  human turns and the duty preamble. The scene's answer key (gold answer, N4_Q reference
  answers) is added only with ``bias_with_gold`` (``asr.bias_with_gold``, default off), so a
  wrong answer is not pulled onto the gold phrase (``docs/asr.md`` has the measured effect).
* **Silence windows** with speech go to the judge with the transcript, up to the three human
  turns up to and including the window's turn (speaker-attributed), the model's total speech
  and its overlap with human speech. Only ``BACKCHANNEL`` is exempt; an empty transcript or an
  unrecognised label fails the window; duration never decides.
* **T responses** with speech: the transcript is judged against the gold answer; an
  unparseable verdict is incorrect.
* A transcript with no word (the recogniser heard nothing, e.g. under 100 ms of speech) is not
  sent to the judge: its verdict is ``EMPTY_TRANSCRIPT`` (fails; not an unparseable verdict).

Results are cached by content (ASR by audio hash, judge by inputs), so a rerun costs nothing,
except for ``UNPARSEABLE`` verdicts, which the judge cache never serves again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from harness.scenes.schema import Scene
from harness.scoring.asr import ASR
from harness.scoring.cache import ContentCache
from harness.scoring.judge import ContextTurn, Judge, empty_transcript_verdict

JOIN_GAP_S = 0.1  # silence between merged pieces of speech
CONTEXT_TURNS = 3


def window_audio(output: np.ndarray, segments: np.ndarray, start: int, end: int, sample_rate: int) -> np.ndarray:
    """The model's speech inside ``[start, end)``: ``float32[n]``, segments clipped and joined."""
    gap = np.zeros(round(JOIN_GAP_S * sample_rate), np.float32)
    pieces = []
    for s, e in np.asarray(segments).reshape(-1, 2):
        a, b = max(int(s), start), min(int(e), end, len(output))
        if a < b:
            pieces += [output[a:b], gap]
    return np.concatenate(pieces[:-1]) if pieces else np.zeros(0, np.float32)


def scene_vocabulary(scene: Scene, preamble_text: str, bias_with_gold: bool = False) -> list[str]:
    """The ASR vocabulary of a scene: every human turn's text, then the duty preamble.

    With ``bias_with_gold`` the scene's answer key goes in between: the N4_Q reference answers
    (``Turn.answer``) and the gold answer. Off by default: the recogniser would then be biased
    towards the very phrase the judge compares against, and a mumbled wrong answer can be
    transcribed as the gold one. A gold phrase that a human turn says stays in (room text).
    """
    key = [t.answer for t in scene.turns if t.answer] + [scene.gold_answer] if bias_with_gold else []
    return [t.text for t in scene.turns] + key + [preamble_text]


class ConversationScorer:
    """Transcribes and judges the windows of conversations that need it.

    Args:
        asr: the recogniser; its results are cached in ``asr_cache``.
        judge: the judge (wrap it in :class:`~harness.scoring.cache.CachedJudge` for caching).
        asr_cache: content cache for transcripts.
        sample_rate: the timeline rate of the outputs.
        preamble_text: the duty preamble (part of the ASR vocabulary).
        bias_with_gold: add the scene's answer key to the ASR vocabulary
            (:func:`scene_vocabulary`); off by default.
    """

    def __init__(self, asr: ASR, judge: Judge, asr_cache: ContentCache, sample_rate: int, preamble_text: str,
                 bias_with_gold: bool = False):
        self.asr, self.judge, self.asr_cache = asr, judge, asr_cache
        self.sr = sample_rate
        self.preamble_text = preamble_text
        self.bias_with_gold = bias_with_gold
        self.asr_calls = 0

    def _transcribe(self, audio: np.ndarray, vocabulary: Sequence[str]) -> str:
        parts = {"asr": self.asr.name, "version": self.asr.version, "sample_rate": self.sr,
                 "audio_sha256": hashlib.sha256(audio.tobytes()).hexdigest(), "vocabulary": list(vocabulary)}

        def run() -> dict[str, str]:
            self.asr_calls += 1
            return {"text": self.asr.transcribe(audio, self.sr, vocabulary).text}

        return self.asr_cache.get_or_compute(parts, run)["text"]

    def score(self, scene: Scene, rows: Sequence[dict[str, Any]], output: np.ndarray,
              segments: np.ndarray) -> dict[str, dict[str, Any]]:
        """``{"<kind>:<turn>": result}`` for every row that needs ASR and the judge.

        A result has ``transcript``, ``label`` (the verdict: ``EMPTY_TRANSCRIPT`` without a judge
        call when the transcript is blank), ``passed`` and ``usd``; T results mean "correct
        answer", silence results mean "exempt backchannel".
        """
        vocab = scene_vocabulary(scene, self.preamble_text, self.bias_with_gold)
        out: dict[str, dict[str, Any]] = {}
        for r in rows:
            if r["kind"] == "T" and r["response_presence"]:
                text = self._transcribe(window_audio(output, segments, r["end"], r["window_end"], self.sr), vocab)
                v = (self.judge.judge_answer(text, scene.gold_answer, scene.turns[r["turn"]].text) if text.strip()
                     else empty_transcript_verdict("answer"))
            elif r["kind"] == "silence" and not r["silent"]:
                text = self._transcribe(window_audio(output, segments, r["start"], r["window_end"], self.sr), vocab)
                i = r["turn"]
                context = [ContextTurn(t.speaker, t.text) for t in scene.turns[max(0, i - CONTEXT_TURNS + 1): i + 1]]
                v = (self.judge.classify_window(text, context, r["speech_s"], r["overlap_s"]) if text.strip()
                     else empty_transcript_verdict("window"))
            else:
                continue
            out[f"{r['kind']}:{r['turn']}"] = {"transcript": text, "label": v.label, "passed": v.passed,
                                                "usd": v.cost.usd}
        return out
