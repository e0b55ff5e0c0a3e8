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
measured in ``run.json`` (:func:`harness.runtime.manifest.preamble_facts`) and the synth stage's index holds the clip's
length in samples.
"""

from __future__ import annotations

DUTY_TEXT = (
    "Hello Aria. You are a voice assistant, and you are in a room with several people who are talking with "
    "each other. Listen to the whole conversation, from beginning to end. Answer only when someone speaks "
    "directly to you and asks you something. When people talk to each other, to another device or assistant, "
    "or to themselves, stay silent, even when they mention you. If someone else answers a question that was "
    "meant for you, or tells you not to answer, stop talking and let them speak. While nobody is speaking to "
    "you, keep listening quietly. The conversation starts now."
)

PAPER_PREAMBLE_S = 31.9  # spec section 3: the paper's spoken duty preamble, seconds

