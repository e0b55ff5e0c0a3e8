"""The spoken duty preamble (spec section 3): every model hears it before the scene.

Our own words (the paper's text is not public); it states the paper's policy, respond only when
someone speaks directly to Aria, as five duties: listen to the whole conversation, answer only
when spoken to directly and asked something, stay silent when people talk to each other, to
another device or to themselves (also when they mention Aria), and stop and let them speak when
someone else answers a question meant for Aria or tells it not to answer.

Its length is sized to the paper's 31.9 s (spec section 3) with the default engine: espeak-ng
1.51, narrator ``en-us+m7`` at ``tts.words_per_minute`` 175 (the rate every voice of the room
speaks at), trimmed as every clip is, speaks these 100 words (571 characters) in **32.16 s**
(+0.8 %), measured (docs/protocol-decisions.md, "The duty preamble"). Qwen3-TTS (``tts=qwen3``)
speaks slower: the paper's own T turns run at 13.6-14.4 characters per second (111.6 characters
in 8.18 s explicit, 123.3 in 8.58 s implicit) against espeak-ng's 17.8, so this text would take
about 40-42 s there, not measured (no GPU or weights here). Each run records the length it
measured in ``run.json`` (:func:`preamble_facts`) and the synth stage's index holds the clip's
length in samples.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.audio.tts.settings import TtsSettings

DUTY_TEXT = (
    "Hello Aria. You are a voice assistant, and you are in a room with several people who are talking with "
    "each other. Listen to the whole conversation, from beginning to end. Answer only when someone speaks "
    "directly to you and asks you something. When people talk to each other, to another device or assistant, "
    "or to themselves, stay silent, even when they mention you. If someone else answers a question that was "
    "meant for you, or tells you not to answer, stop talking and let them speak. While nobody is speaking to "
    "you, keep listening quietly. The conversation starts now."
)

PAPER_PREAMBLE_S = 31.9  # spec section 3: the paper's spoken duty preamble, seconds
MEASURED_IN_DRIVER = ("espeak",)  # engines cheap enough to speak the preamble once when run.json is written


def preamble_facts(tts: TtsSettings, sample_rate: int) -> dict[str, Any]:
    """What ``run.json`` records of the duty preamble (``preamble``), for ``tts`` (the run's
    :class:`~harness.audio.tts.settings.TtsSettings`) at the timeline rate ``sample_rate`` (Hz).

    Returns ``{"words", "characters", "engine", "narrator", "samples", "seconds", "paper_s",
    "measured"}``: ``samples`` and ``seconds`` (at ``sample_rate``) are the spoken length, measured
    by speaking the text once with the run's engine and narrator here, the way the synth stage
    makes the clip (same call, same trim: the same samples), for an engine of
    :data:`MEASURED_IN_DRIVER`; for another engine (``qwen3``, a GPU model) or when the engine
    cannot run here they are None and ``measured`` says why (the synth stage's index then holds
    the clip's length, and the report states it). Raises nothing for an engine failure.
    """
    from harness.audio.tts import SynthesisError, build_tts

    text = tts.preamble_text
    out: dict[str, Any] = {"words": len(text.split()), "characters": len(text), "engine": tts.engine,
                           "narrator": tts.narrator, "samples": None, "seconds": None, "paper_s": PAPER_PREAMBLE_S}
    if tts.engine not in MEASURED_IN_DRIVER:
        out["measured"] = (f"not here: {tts.engine} runs on the synth stage's actors; the clip's length is in "
                           "synth/<h>/index.json (preamble) and in the report")
        return out
    try:
        clip = build_tts(tts, sample_rate).synthesize(text, tts.narrator)
    except SynthesisError as e:
        out["measured"] = f"not measured: {e}"
        return out
    out.update(samples=len(clip), seconds=round(len(clip) / sample_rate, 3),
               measured=f"spoken once when run.json was written ({tts.engine}, at {sample_rate} Hz)")
    return out
